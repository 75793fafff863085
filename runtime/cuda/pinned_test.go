package cuda

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestGPUPinnedAsyncCopy round-trips random bytes host → device → device → host
// through pinned buffers on a non-default stream, at offsets, with the
// destination poisoned first, and checks the transfer counters and bounds.
func TestGPUPinnedAsyncCopy(t *testing.T) {
	d := openGPU(t)
	const n = 3<<20 + 17
	src, err := d.AllocHost(n + 64)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Free()
	dst, err := d.AllocHost(n + 64)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Free()
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(rng.Uint32())
	}
	for i := range dst.Bytes() {
		dst.Bytes()[i] = 0xff
	}
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	a, b := alloc(t, d, n), alloc(t, d, n)
	if err := d.Memset8(b, 0xee, n); err != nil {
		t.Fatal(err)
	}
	h0, d0 := d.Transferred()
	if err := s.CopyHtoDAsync(a, src, 64, n); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyDtoDAsync(b, a, n); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyDtoHAsync(dst, 32, b, n); err != nil {
		t.Fatal(err)
	}
	e, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Destroy()
	if err := e.Record(s); err != nil {
		t.Fatal(err)
	}
	if err := e.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst.Bytes()[32:32+n], src.Bytes()[64:64+n]) {
		t.Error("bytes differ after host → device → device → host")
	}
	if dst.Bytes()[31] != 0xff || dst.Bytes()[32+n] != 0xff {
		t.Error("the copy wrote outside its span")
	}
	if h1, d1 := d.Transferred(); h1-h0 != n || d1-d0 != n {
		t.Errorf("counters moved h2d %d d2h %d, want %d each", h1-h0, d1-d0, n)
	}
	if err := s.CopyDtoHAsync(dst, n, b, 65); err == nil {
		t.Error("a copy past the buffer's end was queued")
	}
	// A stream's memset is ordered with its copies: set b, then copy it back.
	if err := s.Memset8(b, 0x11, n); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyDtoHAsync(dst, 32, b, n); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst.Bytes()[32:32+n], bytes.Repeat([]byte{0x11}, n)) {
		t.Error("the stream's memset is not what its next copy read")
	}
}
