package exec

import "testing"

// TestHostAvailable: where /proc/meminfo exists, available host memory is read
// as a positive byte count.
func TestHostAvailable(t *testing.T) {
	b, ok := hostAvailable()
	if ok && b <= 0 {
		t.Errorf("available host memory %d bytes", b)
	}
	t.Logf("available host memory: %d bytes (known %v)", b, ok)
}
