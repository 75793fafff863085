package train

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/internal/userfile/fifotest"
)

// metricLines reads a --metrics file's lines as step -> loss, failing on a
// step seen twice.
func metricLines(t *testing.T, path string) map[int]float64 {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]float64{}
	for line := range strings.Lines(string(raw)) {
		var m struct {
			Step int
			Loss float64
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%s: line %q: %v", path, line, err)
		}
		if _, dup := out[m.Step]; dup {
			t.Fatalf("%s: step %d twice:\n%s", path, m.Step, raw)
		}
		out[m.Step] = m.Loss
	}
	return out
}

// killRun is the run TestMetricsLineSurvivesKill kills: 6 steps of gpt_mini,
// checkpointed every 3 into dir, with metrics in dir.
func killRun(t *testing.T, dir string) Config {
	c := small(t, 6)
	c.CheckpointDir, c.CheckpointEvery = filepath.Join(dir, "ck"), 3
	c.Metrics = filepath.Join(dir, "m.jsonl")
	return c
}

// TestMetricsLineSurvivesKill: a run is SIGKILLed after step 3's checkpoint
// commits and before step 3's metrics line is written; the resume restores the
// line from the checkpoint, so the file holds every step once, with a straight
// run's losses.
func TestMetricsLineSurvivesKill(t *testing.T) {
	if dir := os.Getenv("LCC_METRICS_CHILD"); dir != "" {
		afterCheckpoint = func(step int) {
			if step == 3 {
				os.Stdout.WriteString("COMMITTED\n")
				time.Sleep(time.Minute) // killed here
			}
		}
		Train(killRun(t, dir))
		os.Exit(3) // not reached
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMetricsLineSurvivesKill$")
	cmd.Env = append(os.Environ(), "LCC_METRICS_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	straight := run(t, small(t, 6))
	line, _ := bufio.NewReader(out).ReadString('\n')
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if line != "COMMITTED\n" {
		t.Fatalf("child said %q", line)
	}
	c := killRun(t, dir)
	if got := metricLines(t, c.Metrics); len(got) != 2 {
		t.Fatalf("the killed run wrote %d lines, want steps 1 and 2", len(got))
	}
	c.Resume = true
	if r := run(t, c); r.FirstStep != 3 {
		t.Fatalf("resumed from step %d, want 3", r.FirstStep)
	}
	got := metricLines(t, c.Metrics)
	for s := 1; s <= 6; s++ {
		if loss, ok := got[s]; !ok || loss != straight.Losses[s-1] {
			t.Errorf("step %d: line %v (present %v), a straight run's loss %v", s, loss, ok,
				straight.Losses[s-1])
		}
	}
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
