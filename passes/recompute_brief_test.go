package passes

import "testing"

// TestBriefTried: a refusal names each fixed policy's peak and counts the
// partial offloads and the knapsack's plans, with the smallest of each.
func TestBriefTried(t *testing.T) {
	gib := func(x float64) int64 { return int64(x * (1 << 30)) }
	got := briefTried([]attempt{{"selective", attemptFixed, gib(336.24)}, {"layers", attemptFixed, gib(71.14)},
		{"layers+offload(6/12)", attemptPartial, gib(61.14)}, {"layers+offload(9/12)", attemptPartial, gib(55.14)},
		{"knapsack", attemptKnapsack, gib(71.14)}, {"knapsack", attemptKnapsack, gib(69.14)},
		{"knapsack", attemptKnapsack, 512}})
	want := "selective=336.24GiB layers=71.14GiB 2 partial offloads (smallest 55.14GiB) 3 knapsack plans (smallest 512B)"
	if got != want {
		t.Errorf("briefTried = %q, want %q", got, want)
	}
}
