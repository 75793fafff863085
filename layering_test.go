package lcc_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// levels is docs/design.md §1's layering, bottom to top. Non-test code imports only
// packages of its own level or below. An entry covers the package of that path and
// every package under it that has no entry of its own; a package that no entry
// covers fails the test, so a new top-level package must be given a level here.
// Packages under an internal/ directory take the level of their lowest importer
// (or, when only tests import them, the level of the directory holding them).
var levels = map[string]int{
	"tensor":     1,
	"collective": 1,
	"targets":    1,

	"ir":          2,
	"safetensors": 2,
	// Test fixtures that build IR (only tests import them).
	"internal/llamagen": 2,
	"internal/attntest": 2,
	// What a GPU test does without its GPU (only tests import it).
	"internal/gputest": 1,
	// Named pipes for the tests of refusing them (only tests import it).
	"internal/userfile/fifotest": 1,
	// Kills a test's child process at a point it names (only tests import it).
	"internal/killtest": 1,
	// Builds ONNX protobuf models (only tests import it).
	"internal/onnxgen": 4,

	// The reference interpreter, which is also the compiler's constant folder, sits
	// below the compiler that uses it.
	"cost":   3,
	"interp": 3,

	"passes":    4,
	"frontends": 4,

	// Test fixture: hostile ONNX models, built with frontends/onnx/onnxpb.
	"internal/hostile": 4,

	"codegen": 5,
	"report":  5,

	// The runtime runs what the compiler made: it sits above it, in pipeline order.
	"runtime": 6,

	"driver": 7,

	"train": 8,
	"perf":  8,

	"cmd":      9,
	"examples": 9,
}

// goPackage is the part of `go list -json` this test reads.
type goPackage struct {
	ImportPath string
	GoFiles    []string
	Imports    []string
}

const module = "github.com/lcc-dev/lcc"

// listPackages runs `go list -json ./...` in the module root.
func listPackages(t *testing.T) []goPackage {
	t.Helper()
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if p, err := exec.LookPath("go"); err == nil {
		gobin = p
	}
	cmd := exec.Command(gobin, "list", "-e", "-json", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages; expected the whole module", len(pkgs))
	}
	return pkgs
}

// rel is a package's path inside the module, "" for packages outside it.
func rel(path string) string {
	if path == module {
		return "."
	}
	if r, ok := strings.CutPrefix(path, module+"/"); ok {
		return r
	}
	return ""
}

// tableLevel is the level of the nearest entry covering the package.
func tableLevel(p string) (int, bool) {
	for d := p; d != "." && d != "/" && d != ""; d = filepath.Dir(d) {
		if l, ok := levels[d]; ok {
			return l, true
		}
	}
	return 0, false
}

func isInternal(p string) bool {
	return strings.HasPrefix(p, "internal/") || strings.Contains(p, "/internal/")
}

// packageLevels assigns every module package with non-test code its level.
func packageLevels(pkgs []goPackage) (map[string]int, error) {
	lv := map[string]int{}
	var errs []error
	importers := map[string][]string{}
	for _, p := range pkgs {
		r := rel(p.ImportPath)
		if r == "" || len(p.GoFiles) == 0 {
			continue
		}
		for _, imp := range p.Imports {
			if ri := rel(imp); ri != "" {
				importers[ri] = append(importers[ri], r)
			}
		}
		if isInternal(r) {
			continue
		}
		l, ok := tableLevel(r)
		if !ok {
			errs = append(errs, fmt.Errorf("package %s has no level: add it (or a "+
				"directory above it) to levels in layering_test.go, following docs/design.md §1", r))
			continue
		}
		lv[r] = l
	}
	// internal/ packages: the lowest importer's level; iterate for internal
	// packages imported only by other internal packages.
	for changed := true; changed; {
		changed = false
		for _, p := range pkgs {
			r := rel(p.ImportPath)
			if r == "" || len(p.GoFiles) == 0 || !isInternal(r) {
				continue
			}
			low := 0
			for _, im := range importers[r] {
				if l, ok := lv[im]; ok && (low == 0 || l < low) {
					low = l
				}
			}
			if low != 0 && lv[r] != low {
				lv[r] = low
				changed = true
			}
		}
	}
	// One that only tests import takes the level of the directory holding it.
	for _, p := range pkgs {
		r := rel(p.ImportPath)
		if r == "" || len(p.GoFiles) == 0 || !isInternal(r) || lv[r] != 0 {
			continue
		}
		if l, ok := tableLevel(r); ok {
			lv[r] = l
		} else {
			errs = append(errs, fmt.Errorf("internal package %s has no importer and no "+
				"level in layering_test.go", r))
		}
	}
	return lv, errors.Join(errs...)
}

// TestLayering fails when a package's non-test code imports a package of a higher
// level (docs/design.md §1). Test files may import anything.
func TestLayering(t *testing.T) {
	pkgs := listPackages(t)
	lv, err := packageLevels(pkgs)
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, p := range pkgs {
		r := rel(p.ImportPath)
		if r == "" || len(p.GoFiles) == 0 {
			continue
		}
		for _, imp := range p.Imports {
			ri := rel(imp)
			if ri == "" {
				continue
			}
			if lv[ri] > lv[r] {
				bad = append(bad, fmt.Sprintf("%s (level %d) imports %s (level %d)",
					r, lv[r], ri, lv[ri]))
			}
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("imports from a lower level into a higher one (docs/design.md §1):\n%s",
			strings.Join(bad, "\n"))
	}
}

// TestLayeringCatchesViolations checks the checker on a made-up module.
func TestLayeringCatchesViolations(t *testing.T) {
	m := func(s string) string { return module + "/" + s }
	pkgs := []goPackage{
		{ImportPath: m("tensor"), GoFiles: []string{"a.go"}},
		{ImportPath: m("codegen/cuda/x"), GoFiles: []string{"a.go"}, Imports: []string{m("driver")}},
		{ImportPath: m("driver"), GoFiles: []string{"a.go"}, Imports: []string{m("a/internal/b")}},
		{ImportPath: m("a/internal/b"), GoFiles: []string{"a.go"}},
		{ImportPath: m("mystery"), GoFiles: []string{"a.go"}},
	}
	lv, err := packageLevels(pkgs)
	if err == nil || !strings.Contains(err.Error(), "package mystery has no level") {
		t.Errorf("unknown package: got error %v", err)
	}
	if lv["codegen/cuda/x"] != 5 || lv["driver"] != 7 || lv["a/internal/b"] != 7 {
		t.Errorf("levels %v", lv)
	}
}

// TestCompilerImportsNoRuntime keeps the compiler below what runs its output: no
// package under passes/ or frontends/ imports runtime/ (the interpreter they fold
// constants with is interp/, a level below them).
func TestCompilerImportsNoRuntime(t *testing.T) {
	for _, p := range listPackages(t) {
		r := strings.TrimPrefix(p.ImportPath, module+"/")
		if !strings.HasPrefix(r, "passes") && !strings.HasPrefix(r, "frontends") {
			continue
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/runtime") {
				t.Errorf("%s imports %s", r, imp)
			}
		}
	}
}
