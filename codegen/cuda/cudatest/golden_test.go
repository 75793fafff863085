package cudatest

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what Golden reports.
type recorder struct {
	testing.TB
	errs, logs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, a ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, a...))
}
func (r *recorder) Logf(format string, a ...any) { r.logs = append(r.logs, fmt.Sprintf(format, a...)) }

// golden runs Golden with -update set to up and returns what it reported.
func golden(t *testing.T, up bool, name, src string) *recorder {
	t.Helper()
	saved := *update
	*update = up
	defer func() { *update = saved }()
	r := &recorder{TB: t}
	Golden(r, name, src)
	return r
}

func TestGolden(t *testing.T) {
	t.Chdir(t.TempDir())
	const src = "extern \"C\" __global__ void k() {\n  // one\n}\n"
	r := golden(t, false, "k", src)
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "-update") {
		t.Fatalf("missing golden file: errors %q, want one naming -update", r.errs)
	}
	if r := golden(t, true, "k", src); len(r.errs) != 0 || len(r.logs) != 1 {
		t.Fatalf("-update: errors %q, logs %q; want the file written", r.errs, r.logs)
	}
	if b, err := os.ReadFile(GoldenPath("k")); err != nil || string(b) != src {
		t.Fatalf("golden file = %q, %v; want the source", b, err)
	}
	if r := golden(t, false, "k", src); len(r.errs) != 0 {
		t.Errorf("same source: %q", r.errs)
	}
	if r := golden(t, true, "k", src); len(r.logs) != 0 {
		t.Errorf("-update of an unchanged file rewrote it: %q", r.logs)
	}
	r = golden(t, false, "k", strings.Replace(src, "one", "two", 1))
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "two") ||
		!strings.Contains(r.errs[0], "one") {
		t.Errorf("changed source: errors %q, want one diff showing both lines", r.errs)
	}
	if r := golden(t, true, "../k", src); len(r.errs) != 1 {
		t.Errorf("name with a slash: errors %q, want one", r.errs)
	}
}
