package cuda

import "testing"

// TestCountPinned: the live count follows allocations and frees, and the peak
// keeps the most held at once (no GPU needed: the count alone).
func TestCountPinned(t *testing.T) {
	live0, _ := PinnedBytes()
	countPinned(100)
	countPinned(50)
	countPinned(-100)
	live, peak := PinnedBytes()
	if live != live0+50 || peak < live0+150 {
		t.Errorf("live %d, peak %d (from %d)", live, peak, live0)
	}
	countPinned(-50)
}
