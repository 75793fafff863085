package cuda

import (
	"testing"

	"github.com/lcc-dev/lcc/tensor"
)

// mustDType parses a dtype name or fails the test.
func mustDType(t *testing.T, s string) tensor.DType {
	t.Helper()
	dt, err := tensor.ParseDType(s)
	if err != nil {
		t.Fatal(err)
	}
	return dt
}
