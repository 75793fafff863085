package passes

import "testing"

// TestBriefTried: a refusal names each fixed policy's peak and counts the
// partial offloads and the knapsack's plans, with the smallest of each.
func TestBriefTried(t *testing.T) {
	got := briefTried([]string{"selective=336.24GiB", "layers=71.14GiB", "layers+offload(6/12)=61.14GiB",
		"layers+offload(9/12)=55.14GiB", "knapsack=71.14GiB", "knapsack=69.14GiB", "knapsack=512B"})
	want := "selective=336.24GiB layers=71.14GiB 2 partial offloads (smallest 55.14GiB) 3 knapsack plans (smallest 512B)"
	if got != want {
		t.Errorf("briefTried = %q, want %q", got, want)
	}
}
