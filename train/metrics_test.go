package train

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/internal/userfile/fifotest"
)

// metricLine is one line of a --metrics file: the fields the tests read, and
// all its keys as decoded JSON.
type metricLine struct {
	Step     int     `json:"step"`
	Loss     float64 `json:"loss"`
	GradNorm float64 `json:"grad_norm"`
	Keys     map[string]any
	Text     string
}

// readMetrics reads a --metrics file, line by line, failing on a line that is
// not JSON.
func readMetrics(t *testing.T, path string) []metricLine {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []metricLine
	for line := range strings.Lines(string(raw)) {
		m := metricLine{Text: strings.TrimSuffix(line, "\n")}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%s: line %q: %v", path, line, err)
		}
		if err := json.Unmarshal([]byte(line), &m.Keys); err != nil {
			t.Fatalf("%s: line %q: %v", path, line, err)
		}
		out = append(out, m)
	}
	return out
}

// metricLines reads a --metrics file's lines as step -> loss, failing on a
// step seen twice.
func metricLines(t *testing.T, path string) map[int]float64 {
	t.Helper()
	out := map[int]float64{}
	for _, m := range readMetrics(t, path) {
		if _, dup := out[m.Step]; dup {
			t.Fatalf("%s: step %d twice", path, m.Step)
		}
		out[m.Step] = m.Loss
	}
	return out
}

// TestMetricsFullDisk: a --metrics file whose writes fail (a full disk:
// /dev/full) is reported once, and training goes on to the end.
func TestMetricsFullDisk(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full here")
	}
	c := small(t, 3)
	c.Metrics = "/dev/full"
	var log strings.Builder
	c.Log = &log
	r, err := Train(c)
	if err != nil || r.Step != 3 {
		t.Fatalf("training stopped at a full metrics disk: %v", err)
	}
	if n := strings.Count(log.String(), "--metrics"); n != 1 ||
		!strings.Contains(log.String(), "no space left on device") ||
		!strings.Contains(log.String(), "training goes on") {
		t.Errorf("want one warning about the full disk, got %d:\n%s", n, log.String())
	}
}

// TestMetricsPipeWithoutReader: --metrics naming a named pipe no one reads
// fails the run at once, naming it, instead of blocking when the pipe fills.
func TestMetricsPipeWithoutReader(t *testing.T) {
	c := small(t, 1)
	c.Metrics = fifotest.Make(t, t.TempDir(), "m.jsonl")
	var err error
	fifotest.Within(t, 30*time.Second, []string{c.Metrics}, func() { _, err = Train(c) })
	want := "--metrics: open " + c.Metrics + ": a named pipe with no reader"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
}
