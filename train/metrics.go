package train

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

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
