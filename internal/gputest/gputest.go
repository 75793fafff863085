// Package gputest decides what a GPU test does where its GPU, driver library or
// compiler is missing. On a developer's or CI's machine without a GPU such a test
// skips, so CI stays green; on the device, where the GPU is the point, a skip
// would hide a broken run as a pass. LCC_REQUIRE_GPU=N (scripts/gpu_check.sh sets
// it) says the machine has N GPUs and everything they need: a test that would
// skip for want of them fails instead, and only a test that needs more than N
// GPUs still skips.
package gputest

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

// Env is the variable that turns missing-GPU skips into failures.
const Env = "LCC_REQUIRE_GPU"

// Required is the number of GPUs LCC_REQUIRE_GPU promises (0 when unset; a value
// that is not a count, such as "yes", promises one).
func Required() int {
	v := os.Getenv(Env)
	if v == "" || v == "0" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return n
	}
	return 1
}

// Skipf skips t for a missing GPU, library or compiler, or fails it when the
// machine is required to have them.
func Skipf(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required() > 0 {
		t.Fatalf("%s=%s, but: %s", Env, os.Getenv(Env), msg)
		return
	}
	t.Skip(msg)
}

// NeedGPUs skips t when fewer than need GPUs are present (have), and fails it
// when LCC_REQUIRE_GPU promised at least need.
func NeedGPUs(t testing.TB, have, need int, why string) {
	t.Helper()
	if have >= need {
		return
	}
	if Required() >= need {
		t.Fatalf("%s=%s, but found %d GPUs: %s", Env, os.Getenv(Env), have, why)
		return
	}
	t.Skipf("skipping: needs %d GPUs (found %d): %s", need, have, why)
}
