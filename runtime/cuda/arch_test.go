package cuda

import (
	"strings"
	"testing"
)

// TestKernelArch: code for no particular arch compiles for the device's own;
// architecture-specific code only on its own generation.
func TestKernelArch(t *testing.T) {
	for _, c := range []struct{ dev, arch, want, err string }{
		{"sm_90", "", "sm_90", ""},
		{"sm_80", "", "sm_80", ""},
		{"sm_90", "sm_90a", "sm_90a", ""},
		{"sm_80", "sm_90a", "", "code built for sm_90a does not run on sm_80"},
		{"sm_100", "sm_90a", "", "does not run on sm_100"},
	} {
		got, err := ArchOn(c.dev, c.arch)
		if got != c.want || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("ArchOn(%q, %q) = %q, %v; want %q, %q", c.dev, c.arch, got, err, c.want, c.err)
		}
	}
}
