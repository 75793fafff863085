package driver

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/internal/onnxgen"
	"github.com/lcc-dev/lcc/targets"
)

// compileGenerated writes g to a file, loads and compiles it for target, and
// returns the result, the wall time of the whole (decode, import, passes,
// codegen, report) and the CPU time the process spent on it. The bounds hold the
// CPU time: the test machine's two cores are shared, so its wall time says as
// much about the neighbours as about lcc.
func compileGenerated(t *testing.T, g *onnxgen.Graph, target string) (*Result, time.Duration, time.Duration) {
	t.Helper()
	data, err := g.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "model.onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	tg, err := targets.Lookup(target)
	if err != nil {
		t.Fatal(err)
	}
	start, cpu := time.Now(), cpuTime(t)
	f, err := Load(path, Bindings{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Compile(f, CompileOptions{Target: tg, Model: path, TimePasses: true, DefaultShard: true})
	if err != nil {
		t.Fatal(err)
	}
	return res, time.Since(start), cpuTime(t) - cpu
}

// cpuTime is the user and system time of the process so far.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestCompileAddChain is issue #23's model: 16,000 adds in a chain took 58.7 s
// to compile, 58.3 s of it in match-norms, which listed every value's readers
// once per add. Linear passes compile it in well under a second.
func TestCompileAddChain(t *testing.T) {
	for _, target := range []string{"cpu", "h200x1"} {
		res, wall, took := compileGenerated(t, onnxgen.AddChain(16000), target)
		t.Logf("%s: 16,000 adds compiled in %v (%v of CPU)", target, wall, took)
		if took > 5*time.Second {
			t.Errorf("%s: 16,000 adds took %v to compile, want under 5 s", target, took)
		}
		if res.Report.Ops["add"] != 16000 && target == "cpu" {
			t.Errorf("%s: ops %v, want 16000 adds", target, res.Report.Ops)
		}
	}
}

// TestCompileLargeGraph holds every stage to linear (or n·log n) time: a
// training step of a generated 100,000-node graph (10,000 normalised residual
// blocks, with constants read by every block) compiles on the CPU target in
// under 10 s, and no pass takes more than a fifth of that time.
func TestCompileLargeGraph(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a 100,000-node graph")
	}
	g := onnxgen.Blocks(10000, 8)
	if g.Nodes() < 100000 {
		t.Fatalf("generated %d nodes, want 100,000", g.Nodes())
	}
	res, wall, took := compileGenerated(t, g, "cpu")
	t.Logf("%d nodes compiled in %v (%v of CPU)", g.Nodes(), wall, took)
	if took > 10*time.Second {
		t.Errorf("a %d-node graph took %v of CPU to compile, want under 10 s", g.Nodes(), took)
	}
	// Pass timings are wall times, so they are held to a share of the wall time.
	for _, st := range res.Report.Passes {
		if d := time.Duration(st.Micros) * time.Microsecond; d > wall/5 {
			t.Errorf("pass %s took %v of %v", st.Name, d, wall)
		}
	}
	if res.Report.Ops["rms_norm"] != 10000 || res.Loss != "loss" {
		t.Errorf("ops %v, loss %q: want 10,000 rms_norm in a training step of loss", res.Report.Ops,
			res.Loss)
	}
}
