package train

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/internal/hostmem"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/report"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/optim"
)

// The host side of a GPU run (issue #26). The plan's host peak (the compile
// report's, driver's hostplan.go) was made without the machine's figures, so
// that lcc compile and lcc train name the same program; before the run
// allocates its optimizer state, arena and pinned buffers, checkHost compares
// what the plan still has to allocate with the limits measured here, and
// refuses a run that would not fit, naming the figures, where the limit comes
// from and the --host-memory-budget that plans within it. Once the state is on
// the device, releaseHost drops the host copies the run no longer reads.

// replansForHost says whether a GPU run plans again under the host's measured
// limits when lcc compile's plan (no --host-memory-budget) does not fit them:
// when no flag bounds its host side. (A compiled folder's step keeps its
// program: newTrainer keeps no model to plan again from.)
func (c Config) replansForHost() bool {
	return c.Device == "cuda" && c.HostMemoryBudget == 0
}

// fitMeasuredHost checks step's host plan against the host's limits lim.
// When it does not fit and no --host-memory-budget was given, the step is
// compiled again from orig (the model before the passes; nil: never) under the budget
// the host has, the model already loaded plus what is available, so that
// checkpointing keeps to it (less offload, the optimizer state in host memory
// only where it fits, or a refusal naming what would fit); the run says so,
// because its program is then not the one lcc compile gives without the flag.
func fitMeasuredHost(cfg Config, step *driver.Result, orig *ir.Func, lim hostmem.Limits) (*driver.Result, error) {
	loaded := loadedBytes(step.Func)
	err := checkHost(step.Report.Memory, loaded, lim)
	if err == nil || orig == nil || !cfg.replansForHost() {
		return step, err
	}
	budget := (lim.Available + loaded + step.Report.Memory.HostRuntimeBytes) &^ (1<<20 - 1)
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	fmt.Fprintf(progress, "host    the plan's host peak %s does not fit this host (%s available, %s "+
		"of the model loaded): planning again under --host-memory-budget=%dMiB, what the host has "+
		"(lcc compile gives this program with that flag)\n", report.Bytes(step.Report.Memory.HostPeakBytes),
		report.Bytes(lim.Available), report.Bytes(loaded), budget>>20)
	c := cfg
	c.HostMemoryBudget = budget
	var spare *ir.Func
	if cfg.RecompileForDevice {
		spare = orig.Clone()
	}
	again, err := compileStep(c, orig, c.compileOptions())
	if err != nil {
		return nil, err
	}
	if again, err = adoptStep(c, again, spare); err != nil {
		return nil, err
	}
	return again, checkHost(again.Report.Memory, loadedBytes(again.Func), lim)
}

// checkHost refuses a plan m whose host side does not fit the limits lim,
// given loaded bytes of it already held (the model's host tensors).
func checkHost(m report.Memory, loaded int64, lim hostmem.Limits) error {
	if m.HostPeakBytes <= 0 {
		return nil
	}
	if lim.MemLock != hostmem.Unlimited && m.PinnedBytes > lim.MemLock {
		return fmt.Errorf("the plan pins %s of host memory (offloaded activations %s, checkpoint buffer %s), "+
			"more than the %s this process may lock (RLIMIT_MEMLOCK, ulimit -l): raise the limit, or plan "+
			"less offload with --host-memory-budget", report.Bytes(m.PinnedBytes), report.Bytes(m.HostBytes),
			report.Bytes(m.SnapshotHostBytes), report.Bytes(lim.MemLock))
	}
	// The CUDA runtime is loaded already: the session exists before the compile.
	loaded += m.HostRuntimeBytes
	need := max(m.HostPeakBytes-loaded, 0)
	if need <= lim.Available {
		return nil
	}
	resume := ""
	if m.HostResumeBytes > 0 {
		resume = fmt.Sprintf(", %s with the checkpoint --resume loads", report.Bytes(m.HostResumeBytes))
	}
	return fmt.Errorf("the plan needs %s more host memory than the %s already loaded (host peak %s: the "+
		"model as lcc holds it %s%s, pinned %s), but the host has %s available (%s); it would fit with "+
		"--host-memory-budget=%dMiB, under which the plan offloads less (or refuses, saying what fits)",
		report.Bytes(need), report.Bytes(loaded), report.Bytes(m.HostPeakBytes), report.Bytes(m.HostModelBytes),
		resume, report.Bytes(m.PinnedBytes), report.Bytes(lim.Available), lim.Source, (lim.Available+loaded)>>20)
}

// loadedBytes is what f's weights take on the host now (every host tensor
// element in tensor.HostElemBytes).
func loadedBytes(f *ir.Func) int64 {
	var b int64
	for _, p := range f.Params {
		if p.Role == ir.RoleWeight && p.Data != nil {
			b += int64(p.Data.Numel()) * tensor.HostElemBytes
		}
	}
	return b
}

// releaseHost drops the host copies a resident run no longer reads once its
// state is on the device: each trained weight's host tensor and its master and
// moments (checkpoints take them from the device: residentRaw), then returns
// the memory to the operating system, so that the checkpoints' pinned buffer
// allocated next has the room the plan gave it (cost.StepMemory's run phase).
func (t *trainer) releaseHost() {
	for _, w := range t.upd.Weights {
		delete(t.weights, w)
		if p := t.grad.Param(w); p != nil {
			p.Data = nil
		}
		for _, pre := range []string{optim.MasterPrefix, optim.MomentPrefix, optim.VariancePrefix} {
			delete(t.state, pre+w)
			if p := t.upd.Func.Param(pre + w); p != nil {
				p.Data = nil
			}
		}
	}
	debug.FreeOSMemory()
}

// stateTensor is the optimizer state k: t.state's tensor, or the zeros a
// fresh moment holds before its first update (optim.Build allocates none, so a
// GPU run never holds them on the host).
func (t *trainer) stateTensor(k string) *tensor.Tensor {
	if x := t.state[k]; x != nil {
		return x
	}
	return optim.State(t.upd.Func.Param(k))
}

// measureHost fills res's measured host figures: the resident set now and at
// its peak, and the pinned bytes at their peak.
func measureHost(res *Result) {
	if rss, hwm, err := hostmem.Resident(); err == nil {
		res.HostRSSBytes, res.HostHWMBytes = rss, hwm
	}
	_, res.PinnedPeakBytes = cuda.PinnedBytes()
}

// traceHostEnv names the environment variable that makes a run print its host
// memory at each phase of its set-up and its first steps (traceHost): where a
// measured host peak departs from its plan, these lines say which phase put it
// there and whether the Go heap or memory outside it (the CUDA driver's, the
// pinned buffers) holds it.
const traceHostEnv = "LCC_TRACE_HOST"

// traceHost prints one line to w (cfg.Log) when LCC_TRACE_HOST is set: the
// resident set now and at its peak, the Go heap in use and what the Go runtime
// holds of the operating system's memory, and the pinned bytes now.
func traceHost(w io.Writer, phase string) {
	if w == nil || os.Getenv(traceHostEnv) == "" {
		return
	}
	rss, hwm, err := hostmem.Resident()
	if err != nil {
		fmt.Fprintf(w, "lcc: host %-24s %v\n", phase, err)
		return
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	pinned, _ := cuda.PinnedBytes()
	fmt.Fprintf(w, "lcc: host %-24s rss %s  hwm %s  go heap %s (held %s)  pinned %s\n", phase,
		report.Bytes(rss), report.Bytes(hwm), report.Bytes(int64(ms.HeapAlloc)),
		report.Bytes(int64(ms.HeapSys-ms.HeapReleased)), report.Bytes(pinned))
}
