package train

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lcc-dev/lcc/internal/atomicfile"
	"github.com/lcc-dev/lcc/internal/userfile"
)

// afterCheckpoint, when set by a test, runs after a checkpoint's commit and
// before its step's metrics line (where the test kills the run).
var afterCheckpoint func(step int)

// metricsLog writes the --metrics lines. Metrics are a record of the run, not
// part of it: a write that fails (a full disk) is reported once and ends the
// file there, and training goes on. Nothing is written after the failure, so a
// line cut short stays the last one, which a resume drops.
type metricsLog struct {
	f      *os.File
	path   string
	warn   io.Writer
	failed bool
}

// openMetrics opens the metrics file at path for a run starting after step
// first. A fresh run truncates it. A resumed run keeps the lines of steps up to
// first and drops later ones (written after the checkpoint by the run that
// stopped), so the file reads as one straight run; it adds the line of step
// first from the checkpoint (restored) when the run that stopped died before
// writing it. The kept lines are written atomically: a kill during a resume
// loses none. A path that is not a regular file (a pipe, /dev/stdout) is
// appended to. Warnings go to warn (nil: none).
func openMetrics(path string, first int, restored []byte, warn io.Writer) (*metricsLog, error) {
	if warn == nil {
		warn = io.Discard
	}
	l := &metricsLog{path: path, warn: warn}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	var err error
	if first == 0 {
		l.f, err = userfile.OpenWriter(path, os.O_CREATE|os.O_TRUNC, 0o644)
		return l, err
	}
	old, err := userfile.ReadFile(path)
	if err != nil && !errors.Is(err, userfile.ErrNotRegular) && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if !errors.Is(err, userfile.ErrNotRegular) {
		if err := atomicfile.WriteFile(path, keptMetrics(old, first, restored), 0o644); err != nil {
			return nil, err
		}
	}
	l.f, err = userfile.OpenWriter(path, os.O_APPEND|os.O_CREATE, 0o644)
	return l, err
}

// keptMetrics is what a run resumed after step first keeps of the metrics
// file old: its whole lines of steps up to first, then restored if old lacks
// step first's.
func keptMetrics(old []byte, first int, restored []byte) []byte {
	var kept bytes.Buffer
	has := false
	for line := range strings.Lines(string(old)) {
		var m struct{ Step int }
		if json.Unmarshal([]byte(line), &m) == nil && m.Step <= first && strings.HasSuffix(line, "\n") {
			kept.WriteString(line)
			has = has || m.Step == first
		}
	}
	// The checkpoint's JSON is indented; a line is one line.
	if !has && len(restored) > 0 && json.Compact(&kept, restored) == nil {
		kept.WriteByte('\n')
	}
	return kept.Bytes()
}

// write appends m's line, unless a write failed before; nil writes nothing.
func (l *metricsLog) write(m metric) {
	if l == nil || l.failed {
		return
	}
	js, _ := json.Marshal(m)
	if _, err := l.f.Write(append(js, '\n')); err != nil {
		l.failed = true
		fmt.Fprintf(l.warn, "lcc: warning: --metrics: %v; training goes on, without metrics lines from "+
			"step %d\n", err, m.Step)
	}
}

func (l *metricsLog) close() error { return l.f.Close() }

// metric is one line of the --metrics file.
type metric struct {
	Step int `json:"step"`
	// SeqLen is the step's sequence length (it changes between the stages of
	// --seq-len-schedule and at a resume with another --seq-len).
	SeqLen     int     `json:"seq_len"`
	Loss       any     `json:"loss"` // a number, or null if not finite
	LR         float64 `json:"lr"`
	GradNorm   any     `json:"grad_norm"`
	TokensPerS float64 `json:"tokens_per_s"`
	// PlannedPeak is the compile report's per-GPU peak of the step (the same
	// every step), beside which a measured peak is read.
	PlannedPeak int64 `json:"planned_peak_bytes"`
	// MeasuredPeak is the device's measured peak so far (Config.Memory), and
	// HostBytes the bytes this step moved between host and device (resident
	// GPU runs); both omitted when not measured.
	MeasuredPeak int64 `json:"measured_peak_bytes,omitempty"`
	HostBytes    int64 `json:"host_bytes,omitempty"`
	// StepMS is the step's wall-clock time, CheckpointMS the further time the
	// loop then spent on checkpoints (taking one: waiting for the previous
	// write and queueing the copies, or, on the host, all of it; freeing the
	// staging copy of one whose copy is done). A checkpoint step has
	// Checkpoint set, CheckpointWriteMS (within CheckpointMS) the time spent
	// waiting for the previous checkpoint's files, and CheckpointBytes, the
	// bytes its copies move from device to host: they are not in HostBytes,
	// and the next steps overlap them.
	StepMS            float64 `json:"step_ms"`
	Checkpoint        bool    `json:"checkpoint,omitempty"`
	CheckpointMS      float64 `json:"checkpoint_ms,omitempty"`
	CheckpointWriteMS float64 `json:"checkpoint_write_wait_ms,omitempty"`
	CheckpointBytes   int64   `json:"checkpoint_bytes,omitempty"`
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// finite returns v, or nil (JSON null) for NaN and ±Inf, which JSON cannot hold.
func finite(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return v
}
