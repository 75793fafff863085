package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"path/filepath"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/internal/jsonerr"
	"github.com/lcc-dev/lcc/internal/userfile"
	"github.com/lcc-dev/lcc/train/plot"
)

// writeMemoryPlot draws res's planned memory over its schedule to path, and the
// measured peak of a --metrics file when one is given.
func writeMemoryPlot(path, model string, res *driver.Result, metrics string) error {
	// Without a GPU program there is no arena plan to draw; say why the target
	// has none rather than drawing an empty plot.
	if res.Program == nil {
		why := "the target has no GPU program"
		if res.Report.KernelError != "" {
			why = res.Report.KernelError
		}
		return fmt.Errorf("--emit=memory: no arena to draw: %s", why)
	}
	// A sharded plan has one arena per rank, and a single plot would mix them.
	if res.Sharded != nil {
		return fmt.Errorf("--emit=memory: the plan is sequence-sharded; draw one GPU's step with --ranks=1")
	}
	m := res.Report.Memory
	// Live is the arena over the schedule; Beside adds the memory held outside it
	// (optimizer state, fixed buffers) so the line ends at the reported peak.
	s := plot.MemorySeries{Live: cudagen.ArenaUsage(res.Program.Plan), Beside: m.OptimizerBytes + m.FixedBytes,
		PeakBytes: m.PerGPUPeakBytes}
	if metrics != "" {
		var err error
		if s.MeasuredBytes, err = measuredPeak(metrics); err != nil {
			return err
		}
	}
	// The target and the checkpoint policy change the plan most: the title names
	// both, so that one model's plots can be told apart.
	title := fmt.Sprintf("%s: %s per GPU, checkpoint %s", filepath.Base(model),
		res.Report.Target.Name, res.Report.Checkpoints.Policy)
	return plot.Memory(path, title, s)
}

// measuredPeak is the largest measured peak of a --metrics JSONL written by lcc
// train (field measured_peak_bytes).
func measuredPeak(path string) (int64, error) {
	f, err := userfile.Open(path)
	if err != nil {
		return 0, fmt.Errorf("--measured: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	// A metrics line may outgrow Scanner's 64 KiB default; allow up to 16 MiB.
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var peak int64
	line := 0
	for sc.Scan() {
		line++
		// Tolerate blank lines, such as the trailing one an interrupted run leaves.
		if len(sc.Bytes()) == 0 {
			continue
		}
		var rec struct {
			Measured int64 `json:"measured_peak_bytes"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return 0, fmt.Errorf("--measured %s:%d: %w", path, line, jsonerr.Explain(sc.Bytes(), err))
		}
		peak = max(peak, rec.Measured)
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("--measured %s: %w", path, err)
	}
	// A CPU run writes no measured peak; a zero would draw a misleading line at 0.
	if peak == 0 {
		return 0, fmt.Errorf("--measured %s: no line has measured_peak_bytes (lcc train --metrics on a GPU writes it)", path)
	}
	return peak, nil
}
