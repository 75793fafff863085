package plot

import (
	"bytes"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoss(t *testing.T) {
	dir := t.TempDir()
	losses := []float64{6.2, 5.9, math.NaN(), 4.1, 3.3}
	path := filepath.Join(dir, "loss.png")
	if err := Loss(path, "gpt_mini", 10, losses); err != nil {
		t.Fatal(err)
	}
	readablePNG(t, path)
	svg := filepath.Join(dir, "loss.svg")
	if err := Loss(svg, "gpt_mini", 0, losses[:1]); err != nil {
		t.Fatal(err)
	}
	if s, _ := os.ReadFile(svg); !bytes.Contains(s, []byte("<svg")) {
		t.Errorf("not an SVG: %.100s", s)
	}
	for _, tc := range []struct {
		path   string
		losses []float64
		want   string
	}{
		{filepath.Join(dir, "loss.bmp"), losses, "want a .png"},
		{filepath.Join(dir, "nan.png"), []float64{math.NaN()}, "no finite loss"},
	} {
		if err := Loss(tc.path, "", 0, tc.losses); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.path, err, tc.want)
		}
	}
}

// TestMemory: a valid PNG, byte-identical across two draws of the same series.
func TestMemory(t *testing.T) {
	dir := t.TempDir()
	s := MemorySeries{Live: []int64{1 << 30, 3 << 30, 2 << 30, 5 << 29}, Beside: 1 << 29,
		PeakBytes: 7 << 29, MeasuredBytes: 4 << 30}
	var prev []byte
	for i := range 2 {
		path := filepath.Join(dir, fmt.Sprintf("memory%d.png", i))
		if err := Memory(path, "step", s); err != nil {
			t.Fatal(err)
		}
		data := readablePNG(t, path)
		if prev != nil && !bytes.Equal(prev, data) {
			t.Errorf("two draws of the same series differ")
		}
		prev = data
	}
	// The legend names each line's parts: a peak is a total, not "(arena)".
	want := [3]string{"planned at each launch: live arena buffers + optimizer state + fixed costs",
		"planned peak 3.50 GiB: arena + optimizer state + fixed costs",
		"measured peak 4.00 GiB: device memory lcc train used"}
	if got := s.legend(); got != want {
		t.Errorf("legend %q, want %q", got, want)
	}
	if err := Memory(filepath.Join(dir, "m.png"), "", MemorySeries{}); err == nil {
		t.Error("an empty schedule drew")
	}
}

// readablePNG reads the PNG at path, checks it decodes at a readable size and
// returns its bytes.
func readablePNG(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: not a PNG: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() < 300 || b.Dy() < 200 {
		t.Errorf("%s: image %v, want a readable size", path, b)
	}
	return data
}
