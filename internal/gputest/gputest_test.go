package gputest

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a test ended.
type recorder struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Fatalf(f string, args ...any) { r.failed = true; r.msg = sprintf(f, args...) }
func (r *recorder) Skip(args ...any)             { r.skipped = true }
func (r *recorder) Skipf(f string, args ...any)  { r.skipped = true; r.msg = sprintf(f, args...) }
func sprintf(f string, args ...any) string       { return strings.TrimSpace(fmt.Sprintf(f, args...)) }

func TestSkipf(t *testing.T) {
	for _, tc := range []struct {
		env        string
		fail, skip bool
	}{{"", false, true}, {"0", false, true}, {"1", true, false}, {"yes", true, false}} {
		t.Setenv(Env, tc.env)
		r := &recorder{TB: t}
		Skipf(r, "skipping: no usable GPU: %s", "cuInit failed")
		if r.failed != tc.fail || r.skipped != tc.skip {
			t.Errorf("%s=%q: failed %v skipped %v, want %v %v", Env, tc.env, r.failed, r.skipped, tc.fail, tc.skip)
		}
		if tc.fail && !strings.Contains(r.msg, "cuInit failed") {
			t.Errorf("failure %q does not give the reason", r.msg)
		}
	}
}

func TestNeedGPUs(t *testing.T) {
	for _, tc := range []struct {
		env              string
		have, need       int
		fail, skip, pass bool
	}{
		{"1", 1, 2, false, true, false}, // one GPU promised: a two-GPU test still skips
		{"2", 1, 2, true, false, false},
		{"", 1, 2, false, true, false},
		{"1", 2, 2, false, false, true},
	} {
		t.Setenv(Env, tc.env)
		r := &recorder{TB: t}
		NeedGPUs(r, tc.have, tc.need, "ring over two devices")
		if r.failed != tc.fail || r.skipped != tc.skip || (!r.failed && !r.skipped) != tc.pass {
			t.Errorf("%+v: failed %v skipped %v", tc, r.failed, r.skipped)
		}
	}
}
