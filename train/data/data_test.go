package data

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/internal/userfile/fifotest"
)

func open(t *testing.T, spec string, o Options) *Stream {
	t.Helper()
	s, err := Open(spec, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func next(t *testing.T, s *Stream) *Batch {
	t.Helper()
	b, err := s.Next()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCopy checks the copy task's layout and labels.
func TestCopy(t *testing.T) {
	s := open(t, "synthetic:copy", Options{SeqLen: 9, Batch: 2, Vocab: 50, Seed: 3})
	b := next(t, s)
	if !slices.Equal(b.InputIDs.Shape, []int64{2, 9}) {
		t.Fatalf("shape %v", b.InputIDs.Shape)
	}
	for r := range 2 {
		ids, lab := b.InputIDs.I[r*9:(r+1)*9], b.Labels.I[r*9:(r+1)*9]
		if !slices.Equal(ids[:4], ids[4:8]) || ids[8] != 0 {
			t.Errorf("row %d: %v is not x x 0", r, ids)
		}
		// Targets of positions 3..6 are the copy ids[4..7]; the rest are ignored.
		want := []int64{-100, -100, -100, ids[4], ids[5], ids[6], ids[7], -100, -100}
		if !slices.Equal(lab, want) {
			t.Errorf("row %d: labels %v, want %v", r, lab, want)
		}
		for _, id := range ids {
			if id < 0 || id >= 50 {
				t.Errorf("token %d outside the vocabulary", id)
			}
		}
	}
}

// TestPasskey checks the text, and that only the answer is labelled.
func TestPasskey(t *testing.T) {
	s := open(t, "synthetic:passkey", Options{SeqLen: 96, Batch: 3, Vocab: 256, Seed: 1})
	b := next(t, s)
	for r := range 3 {
		ids, lab := b.InputIDs.I[r*96:(r+1)*96], b.Labels.I[r*96:(r+1)*96]
		text := make([]byte, len(ids))
		for i, id := range ids {
			text[i] = byte(id)
		}
		i := strings.Index(string(text), passkeyNeedle)
		if i < 0 {
			t.Fatalf("row %d: no needle in %q", r, text)
		}
		key := string(text[i+len(passkeyNeedle) : i+len(passkeyNeedle)+5])
		if !strings.HasSuffix(string(text), passkeyQuestion+key) {
			t.Errorf("row %d: %q does not end with the question and key %s", r, text, key)
		}
		var got []byte
		for i, l := range lab {
			if l != -100 {
				if l != ids[i+1] {
					t.Errorf("row %d: label %d at %d is not the next token", r, l, i)
				}
				got = append(got, byte(l))
			}
		}
		if string(got) != key {
			t.Errorf("row %d: labelled %q, want only the key %q", r, got, key)
		}
	}
	if _, err := Open("synthetic:passkey", Options{SeqLen: 20, Batch: 1, Vocab: 256}); err == nil {
		t.Error("passkey accepted seq len 20")
	}
}

func writeTokens(t *testing.T, width int, toks []uint32) string {
	t.Helper()
	buf := make([]byte, width*len(toks))
	for i, v := range toks {
		switch width {
		case 1:
			buf[i] = byte(v)
		case 2:
			binary.LittleEndian.PutUint16(buf[2*i:], uint16(v))
		case 4:
			binary.LittleEndian.PutUint32(buf[4*i:], v)
		}
	}
	p := filepath.Join(t.TempDir(), "toks.bin")
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTokenFiles reads uint16, uint32 and byte files window by window, wrapping.
func TestTokenFiles(t *testing.T) {
	toks := []uint32{10, 11, 12, 13, 14, 15, 16, 17} // 8 tokens, T=3: windows 0..3, 3..6
	for _, tc := range []struct {
		spec  string
		width int
	}{{"tokens:", 2}, {"tokens:", 4}, {"bytes:", 1}} {
		p := writeTokens(t, tc.width, toks)
		s := open(t, tc.spec+p, Options{SeqLen: 3, Batch: 3, Vocab: 300, TokenBytes: tc.width})
		b := next(t, s)
		wantIDs := []int64{10, 11, 12, 13, 14, 15, 10, 11, 12}
		wantLab := []int64{11, 12, 13, 14, 15, 16, 11, 12, 13}
		if !slices.Equal(b.InputIDs.I, wantIDs) || !slices.Equal(b.Labels.I, wantLab) {
			t.Errorf("%s width %d: ids %v labels %v, want %v %v", tc.spec, tc.width,
				b.InputIDs.I, b.Labels.I, wantIDs, wantLab)
		}
	}
}

// TestTokenFileNewSeqLen restores a file stream's position into a stream of
// another seq len: it reads on from the token after the last window, and wraps
// to token 0 when a window would pass the end; a position of a checkpoint older
// than Offset reads window Sequences mod W, as streams then did.
func TestTokenFileNewSeqLen(t *testing.T) {
	toks := make([]uint32, 20)
	for i := range toks {
		toks[i] = uint32(100 + i)
	}
	p := writeTokens(t, 2, toks)
	a := open(t, "tokens:"+p, Options{SeqLen: 3, Batch: 2, Vocab: 300})
	next(t, a) // windows at tokens 0 and 3
	st := a.State()
	if st.Offset == nil || *st.Offset != 6 || st.Sequences != 2 {
		t.Fatalf("state after 2 windows of 3: %+v, want offset 6", st)
	}
	b := open(t, "tokens:"+p, Options{SeqLen: 5, Batch: 3, Vocab: 300})
	if err := b.Restore(st); err != nil {
		t.Fatal(err)
	}
	got := next(t, b) // windows at 6 and 11; 16+5+1 > 20: the third starts at 0
	want := []int64{106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 100, 101, 102, 103, 104}
	if !slices.Equal(got.InputIDs.I, want) || got.Labels.I[4] != 111 || got.Labels.I[14] != 105 {
		t.Errorf("after the restore at seq 5: ids %v labels %v, want ids %v", got.InputIDs.I, got.Labels.I, want)
	}
	legacy := st
	legacy.Offset, legacy.Sequences = nil, 7 // 6 windows of 3 in 20 tokens: window 1
	c := open(t, "tokens:"+p, Options{SeqLen: 3, Batch: 1, Vocab: 300})
	if err := c.Restore(legacy); err != nil {
		t.Fatal(err)
	}
	if got := next(t, c); got.InputIDs.I[0] != 103 {
		t.Errorf("legacy position 7: window at token %d, want 3", got.InputIDs.I[0]-100)
	}
}

// TestFileErrors checks the errors name the flag-level problem and the offset.
func TestFileErrors(t *testing.T) {
	p := writeTokens(t, 2, []uint32{1, 2, 3, 700, 5, 6})
	_, err := Open("tokens:"+p, Options{SeqLen: 4, Batch: 1, Vocab: 512, TokenBytes: 2})
	if err == nil || !strings.Contains(err.Error(), "token 700 at byte offset 6 is outside the "+
		"model's vocabulary [0, 512)") || !strings.Contains(err.Error(), p) {
		t.Errorf("out-of-vocabulary token: got %v", err)
	}
	odd := filepath.Join(t.TempDir(), "odd.bin")
	os.WriteFile(odd, []byte{1, 2, 3}, 0o644)
	for _, tc := range []struct {
		spec string
		o    Options
		want string
	}{
		{"tokens:" + odd, Options{TokenBytes: 2}, "not a whole number"},
		{"tokens:" + p, Options{TokenBytes: 3}, "token bytes 3"},
		{"tokens:" + p, Options{SeqLen: 40}, "needs at least 41"},
		{"bytes:" + p, Options{Vocab: 100}, ">= 256"},
		{"tokens:/nonexistent/x", Options{}, "no such file"},
		{"synthetic:nope", Options{}, "unknown synthetic task"},
		{"nope", Options{}, "want synthetic:copy"},
		{"csv:x", Options{}, "unknown source"},
	} {
		o := tc.o
		o.SeqLen, o.Batch = max(o.SeqLen, 4), 1
		if o.Vocab == 0 {
			o.Vocab = 512
		}
		_, err := Open(tc.spec, o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q): got %v, want an error containing %q", tc.spec, err, tc.want)
		}
	}
}

// TestVocabCheckedAtOpen: a token file is checked whole when opened, in chunks:
// an id past the vocabulary in the last chunk, which no early batch reads, fails
// the open naming the file, the offset, the id and the vocabulary; a large file
// reports its progress; a file that cannot hold a bad id is not read.
func TestVocabCheckedAtOpen(t *testing.T) {
	defer func(b int64) { progressBytes = b }(progressBytes)
	progressBytes = scanChunk
	toks := make([]uint32, 3*scanChunk/4+5) // uint32: three chunks and a bit
	for i := range toks {
		toks[i] = uint32(i % 1000)
	}
	toks[len(toks)-2] = 70000
	p := writeTokens(t, 4, toks)
	var log strings.Builder
	_, err := Open("tokens:"+p, Options{SeqLen: 8, Batch: 1, Vocab: 50257, TokenBytes: 4, Log: &log})
	want := fmt.Sprintf("%s: token 70000 at byte offset %d is outside the model's vocabulary "+
		"[0, 50257)", p, 4*(len(toks)-2))
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
	toks[len(toks)-2] = 7
	p = writeTokens(t, 4, toks)
	log.Reset()
	open(t, "tokens:"+p, Options{SeqLen: 8, Batch: 1, Vocab: 50257, TokenBytes: 4, Log: &log})
	if !strings.Contains(log.String(), "checking 3 MiB of token ids against the vocabulary of "+
		"50257") ||
		!strings.Contains(log.String(), "0% checked\n") ||
		!strings.Contains(log.String(), "every token id is in the vocabulary") {
		t.Errorf("progress:\n%s", log.String())
	}
	// uint16 ids cannot pass a vocabulary of 65536 or more: nothing to check.
	log.Reset()
	p = writeTokens(t, 2, toks)
	open(t, "tokens:"+p, Options{SeqLen: 8, Batch: 1, Vocab: 65536, TokenBytes: 2, Log: &log})
	if log.Len() != 0 {
		t.Errorf("checked a file whose ids all fit:\n%s", log.String())
	}
}

// TestPipeRefused: a named pipe as tokens:FILE or bytes:FILE is refused at
// once, naming it.
func TestPipeRefused(t *testing.T) {
	pipe := fifotest.Make(t, t.TempDir(), "toks.bin")
	for _, spec := range []string{"tokens:", "bytes:"} {
		var err error
		fifotest.Within(t, 10*time.Second, []string{pipe}, func() {
			_, err = Open(spec+pipe, Options{SeqLen: 4, Batch: 1, Vocab: 512})
		})
		if err == nil || !strings.Contains(err.Error(), pipe+": not a regular file (a named pipe)") {
			t.Errorf("%s a named pipe: %v", spec, err)
		}
	}
}

// TestResume checks that a stream restored from State continues the same batches.
func TestResume(t *testing.T) {
	o := Options{SeqLen: 16, Batch: 2, Vocab: 100, Seed: 42}
	a := open(t, "synthetic:copy", o)
	for range 3 {
		next(t, a)
	}
	st := a.State()
	want := next(t, a)
	b := open(t, "synthetic:copy", o)
	if err := b.Restore(st); err != nil {
		t.Fatal(err)
	}
	if got := next(t, b); !slices.Equal(got.InputIDs.I, want.InputIDs.I) {
		t.Error("restored stream differs")
	}
	if err := open(t, "synthetic:passkey", Options{SeqLen: 64, Batch: 1, Vocab: 256}).Restore(st); err == nil {
		t.Error("Restore accepted another spec's state")
	}
	other := open(t, "synthetic:copy", Options{SeqLen: 16, Batch: 2, Vocab: 100, Seed: 43})
	if slices.Equal(next(t, other).InputIDs.I, next(t, open(t, "synthetic:copy", o)).InputIDs.I) {
		t.Error("seeds 42 and 43 gave the same batch")
	}
}

// TestRNG pins the generator's first outputs (SplitMix64's reference values for
// seed 0) and its state round trip.
func TestRNG(t *testing.T) {
	r := NewRNG(0)
	if got := r.Uint64(); got != 0xe220a8397b1dcdaf {
		t.Errorf("first output %x, want e220a8397b1dcdaf", got)
	}
	st := r.State()
	x := r.IntN(1000)
	r2 := NewRNG(99)
	if err := r2.SetState(st); err != nil || r2.IntN(1000) != x {
		t.Errorf("state round trip failed: %v", err)
	}
	if r2.SetState("xyz") == nil {
		t.Error("SetState accepted xyz")
	}
}
