// Package passes holds lcc's graph passes and the manager that runs them.
//
// A pass is a named function over an ir.Func. Pipelines are plain lists of passes
// run in order, as in Go's SSA backend (cmd/compile/internal/ssa/compile.go). The
// manager verifies the IR after each pass when asked, times each pass, records
// whether it changed the function (by comparing printed IR, which is
// deterministic), can print the IR after a named pass, and turns a panic inside a
// pass into an error that names the pass and dumps the IR it was working on.
package passes

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/lcc-dev/lcc/ir"
)

// Pass is one step of a pipeline.
type Pass struct {
	// Name is the kebab-case name used in flags, dumps and errors.
	Name string
	// Doc is a one-line description for `lcc passes`.
	Doc string
	// Config is the pass's configuration in words ("loss=auto"), printed by
	// `lcc passes --pipeline`; "" when it has none.
	Config string
	// Run rewrites f in place; it returns an error for user-facing problems
	// (a configuration that cannot apply) and may panic with "lcc: BUG: ..." on
	// internal invariant violations.
	Run func(f *ir.Func) error
}

// Options controls a pipeline run.
type Options struct {
	// VerifyEach runs ir.Verify after every pass (driver always sets it: a pass
	// that breaks the IR is named at once, not by a later pass or codegen).
	VerifyEach bool
	// PrintAfter names a pass after which to print the IR, or "all".
	PrintAfter string
	// Out receives printed IR (os.Stderr when nil).
	Out io.Writer
	// DumpDir, when set, receives the IR of a pass that failed.
	DumpDir string
}

// Stat records one pass's run for the report.
type Stat struct {
	Name string        `json:"name"`
	Time time.Duration `json:"-"`
	// Micros is the pass's wall time; Compile clears it unless asked
	// (--time-passes), since timings would make reports differ run to run.
	Micros  int64 `json:"time_us,omitempty"`
	Changed bool  `json:"changed"`
}

// Run applies the passes to f in order and returns per-pass statistics.
func Run(f *ir.Func, pipeline []Pass, opts Options) ([]Stat, error) {
	out := opts.Out
	if out == nil {
		out = os.Stderr
	}
	var stats []Stat
	// Whether a pass changed f is told by digests; the text is printed only
	// for --print-ir-after and for a dump of the IR a failed pass started from.
	text := func() string {
		if opts.DumpDir == "" {
			return ""
		}
		return ir.Print(f)
	}
	before, beforeText := ir.Digest(f), text()
	for _, p := range pipeline {
		start := time.Now()
		if err := runOne(f, p); err != nil {
			return stats, fmt.Errorf("pass %s: %w%s", p.Name, err, dump(opts.DumpDir, p.Name, beforeText))
		}
		el := time.Since(start)
		after, afterText := ir.Digest(f), text()
		st := Stat{Name: p.Name, Time: el, Micros: el.Microseconds(), Changed: after != before}
		stats = append(stats, st)
		if opts.VerifyEach {
			if err := ir.Verify(f); err != nil {
				return stats, fmt.Errorf("after pass %s: %w%s", p.Name, err, dump(opts.DumpDir, p.Name, afterText))
			}
		}
		if opts.PrintAfter == "all" || opts.PrintAfter == p.Name {
			fmt.Fprintf(out, "// ----- IR after %s -----\n%s", p.Name, ir.Print(f))
		}
		before, beforeText = after, afterText
	}
	return stats, nil
}

func runOne(f *ir.Func, p Pass) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, firstLines(string(debug.Stack()), 12))
		}
	}()
	return p.Run(f)
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

func dump(dir, pass, ir string) string {
	if dir == "" {
		return ""
	}
	path := filepath.Join(dir, "failed-"+pass+".lcc")
	if err := os.WriteFile(path, []byte(ir), 0o644); err != nil {
		return ""
	}
	return " (IR before the failure: " + path + ")"
}
