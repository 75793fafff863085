package cuda

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// TestGPUGraph captures a memset (y = 0) and a saxpy kernel (y += x) from a
// stream: nothing runs while capturing (y stays NaN), each replay runs both
// in order (after three, y = x exactly), and a failing capture returns its
// work's error and leaves the stream usable.
func TestGPUGraph(t *testing.T) {
	d := openGPU(t)
	if err := GraphsAvailable(); err != nil {
		t.Fatalf("the driver lacks CUDA graphs: %v", err)
	}
	f := loadKernel(t, d, saxpySrc, "saxpy", d.Arch())
	const n = 4099
	x := randF32(rand.New(rand.NewPCG(5, 6)), n)
	dx, dy := alloc(t, d, 4*n), alloc(t, d, 4*n)
	if err := CopyHtoD(d, dx, x); err != nil {
		t.Fatal(err)
	}
	if err := d.Memset32(dy, 0x7fc00000, n); err != nil { // NaN: a skipped memset shows
		t.Fatal(err)
	}
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	g, err := s.Capture(func() error {
		if err := s.Memset8(dy, 0, 4*n); err != nil {
			return err
		}
		return f.Launch([3]uint32{(n + 255) / 256, 1, 1}, [3]uint32{256, 1, 1}, 0, s, int32(n), float32(1), dx, dy)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	if g.Nodes() != 2 {
		t.Errorf("captured %d nodes, want a memset and a kernel", g.Nodes())
	}
	got := make([]float32, n)
	if err := CopyDtoH(d, got, dy); err != nil {
		t.Fatal(err)
	}
	if got[0] == got[0] {
		t.Fatalf("y[0] = %v after capture: the captured work ran", got[0])
	}
	for range 3 {
		if err := g.Launch(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := CopyDtoH(d, got, dy); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != x[i] {
			t.Fatalf("y[%d] = %v after three replays of (y = 0; y += x), want %v", i, got[i], x[i])
		}
	}
	boom := errors.New("boom")
	if _, err := s.Capture(func() error { return boom }); !errors.Is(err, boom) {
		t.Errorf("a failing capture: %v, want its work's error", err)
	}
	if err := s.Memset8(dy, 0, 4); err != nil {
		t.Errorf("the stream after a failed capture: %v", err)
	}
	if err := s.Synchronize(); err != nil {
		t.Errorf("the stream after a failed capture: %v", err)
	}
}
