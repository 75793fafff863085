package cudatest

import (
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// update is the -update flag of every test binary that imports this package, so
// packages that call Golden must not define their own.
var update = flag.Bool("update", false, "rewrite testdata/golden/*.cu with the kernels "+
	"the tests render (cudatest.Golden)")

// goldenName is what a golden file may be called: it becomes a path.
var goldenName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// GoldenPath returns where Golden keeps the kernel called name: testdata/golden/
// name.cu under the test's package folder (the working directory of `go test`).
func GoldenPath(name string) string {
	return filepath.Join("testdata", "golden", name+".cu")
}

// Golden compares src, a rendered kernel, with the file at GoldenPath(name) and
// reports a line diff when they differ. Run with -update, it writes src there
// instead, creating the folder:
//
//	go test ./codegen/cuda/flash -run Golden -update
//
// so a deliberate change to a kernel's text is one command and a diff to review.
// It reports through t.Errorf and carries on, so one test can check many kernels.
func Golden(t testing.TB, name, src string) {
	t.Helper()
	if !goldenName.MatchString(name) {
		t.Errorf("cudatest: golden name %q: want letters, digits, '_', '-' or '.'", name)
		return
	}
	path := GoldenPath(name)
	if *update {
		old, err := os.ReadFile(path)
		if err == nil && string(old) == src {
			return
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Errorf("cudatest: %v", err)
			return
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Errorf("cudatest: %v", err)
			return
		}
		t.Logf("cudatest: wrote %s", path)
		return
	}
	want, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cudatest: no golden file %s for kernel %s: run the test with -update to "+
			"write it", path, name)
		return
	}
	if err != nil {
		t.Errorf("cudatest: %v", err)
		return
	}
	if string(want) != src {
		diff := cmp.Diff(strings.Split(string(want), "\n"), strings.Split(src, "\n"))
		t.Errorf("cudatest: kernel %s differs from %s (-golden +rendered); if the change is "+
			"meant, run the test with -update:\n%s", name, path, diff)
	}
}
