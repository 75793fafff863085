package runner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/train"
)

// childJob is what a re-executed test binary trains as one rank.
type childJob struct {
	Steps, StopAt, CheckpointEvery int
	CheckpointDir                  string
	Resume                         bool
	Attention                      driver.AttentionOptions
	ShardMode                      string
	Timeout                        time.Duration
	Out                            string // where the child writes its Result
}

const childVar = "LCC_RUNNER_TEST_JOB"

// TestMain runs one rank of a multi-process test when the test binary is
// re-executed with childVar set (and the launcher's variables); otherwise the
// tests.
func TestMain(m *testing.M) {
	if js := os.Getenv(childVar); js != "" {
		if err := child(js); err != nil {
			fmt.Fprintln(os.Stderr, "lcc:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func child(js string) error {
	var j childJob
	if err := json.Unmarshal([]byte(js), &j); err != nil {
		return err
	}
	env, ok, err := EnvFrom(os.Getenv)
	if err != nil || !ok {
		return fmt.Errorf("launcher environment: %v (set: %v)", err, ok)
	}
	c := job(j)
	res, err := Process(c, env, j.Timeout)
	if err != nil {
		return err
	}
	out, _ := json.Marshal(res)
	return os.WriteFile(j.Out, out, 0o644)
}

// job is the training configuration of j (as base, with j's settings).
func job(j childJob) train.Config {
	c := base(j.Steps)
	c.StopAt, c.CheckpointEvery, c.CheckpointDir, c.Resume = j.StopAt, j.CheckpointEvery,
		j.CheckpointDir, j.Resume
	c.Attention, c.ShardMode = j.Attention, j.ShardMode
	return c
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// rankProc is one started rank.
type rankProc struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	out    string
	done   chan error
}

// launch starts ranks 0..n−1 of j as processes of this test binary, as torchrun
// would: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and a free port.
func launch(t *testing.T, n int, j childJob) []*rankProc {
	t.Helper()
	port := freePort(t)
	dir := t.TempDir()
	ps := make([]*rankProc, n)
	for r := range n {
		j := j
		j.Out = filepath.Join(dir, fmt.Sprintf("rank%d.json", r))
		js, _ := json.Marshal(j)
		p := &rankProc{out: j.Out, done: make(chan error, 1)}
		p.cmd = exec.Command(os.Args[0], "-test.run=^$")
		p.cmd.Env = append(os.Environ(), childVar+"="+string(js), "RANK="+strconv.Itoa(r),
			"WORLD_SIZE="+strconv.Itoa(n), "LOCAL_RANK="+strconv.Itoa(r), "MASTER_ADDR=127.0.0.1",
			"MASTER_PORT="+strconv.Itoa(port))
		p.cmd.Stderr = &p.stderr
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { p.done <- p.cmd.Wait() }()
		t.Cleanup(func() { p.cmd.Process.Kill() })
		ps[r] = p
	}
	return ps
}

// wait waits for p (at most limit) and returns its result, or its error and stderr.
func (p *rankProc) wait(t *testing.T, limit time.Duration) (*train.Result, error) {
	t.Helper()
	select {
	case err := <-p.done:
		if err != nil {
			return nil, fmt.Errorf("%v: %s", err, strings.TrimSpace(p.stderr.String()))
		}
	case <-time.After(limit):
		t.Fatalf("rank still running after %v", limit)
	}
	b, err := os.ReadFile(p.out)
	if err != nil {
		return nil, err
	}
	var r train.Result
	return &r, json.Unmarshal(b, &r)
}

// TestTwoProcesses: two processes find each other through the rendezvous and
// train together over TCP, with the losses of the in-process ranks (bit for
// bit: the same collectives, the same order of sums) and so of one rank (within
// 1e-5 relative).
func TestTwoProcesses(t *testing.T) {
	for _, mode := range []string{"ring", "dilated"} {
		t.Run(mode, func(t *testing.T) {
			j := childJob{Steps: 3, ShardMode: mode, Timeout: 30 * time.Second,
				Attention: driver.AttentionOptions{Mode: "dense"}}
			if mode == "dilated" {
				j.Attention = dilated
			}
			ps := launch(t, 2, j)
			var got [2]*train.Result
			for r, p := range ps {
				res, err := p.wait(t, time.Minute)
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
				got[r] = res
			}
			c := job(j)
			c.Ranks = 2
			local, err := Local(c, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			c.Ranks = 1
			one, err := train.Train(c)
			if err != nil {
				t.Fatal(err)
			}
			for r := range got {
				if !slices.Equal(bitsOf(got[r].Losses), bitsOf(local.Losses)) {
					t.Errorf("rank %d's losses %v differ from the in-process ranks' %v", r, got[r].Losses,
						local.Losses)
				}
			}
			for i := range one.Losses {
				if d := relErr(got[0].Losses[i], one.Losses[i]); !(d <= 1e-5) {
					t.Errorf("step %d: %v on 2 processes, %v on 1 rank", i+1, got[0].Losses[i], one.Losses[i])
				}
			}
			t.Logf("2 processes %v, 1 rank %v", got[0].Losses, one.Losses)
		})
	}
}

func bitsOf(xs []float64) []uint64 {
	out := make([]uint64, len(xs))
	for i, x := range xs {
		out[i] = math.Float64bits(x)
	}
	return out
}

// latestStep is the newest checkpoint step in dir (0 if none).
func latestStep(dir string) int {
	names, _ := filepath.Glob(filepath.Join(dir, "ckpt-*.json"))
	best := 0
	for _, n := range names {
		s, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(n), "ckpt-"), ".json"))
		if err == nil {
			best = max(best, s)
		}
	}
	return best
}

// waitForStep waits until dir holds a checkpoint of step or later, failing the
// test if rank 0 (p) ends before: before what, says event.
func waitForStep(t *testing.T, p *rankProc, dir string, step int, event string) {
	t.Helper()
	for latestStep(dir) < step {
		select {
		case err := <-p.done:
			t.Fatalf("rank 0 ended before %s: %v: %s", event, err, p.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestKillAndResume: kill -9 of rank 1 mid-run makes rank 0 exit at once with an
// error naming rank 1; both ranks then resume from the last checkpoint (rank
// 0's consolidated one) and continue bit for bit as a straight run.
func TestKillAndResume(t *testing.T) {
	const steps = 30
	dir := t.TempDir()
	j := childJob{Steps: steps, CheckpointEvery: 4, CheckpointDir: dir, ShardMode: "ring",
		Timeout: 30 * time.Second, Attention: driver.AttentionOptions{Mode: "dense"}}
	ps := launch(t, 2, j)
	waitForStep(t, ps[0], dir, 8, "the kill")
	killed := time.Now()
	ps[1].cmd.Process.Signal(syscall.SIGKILL)
	_, err := ps[0].wait(t, time.Minute)
	el := time.Since(killed)
	t.Logf("rank 0 exited %v after the kill: %v", el, err)
	if err == nil || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("rank 0: %v, want an error naming rank 1", err)
	}
	if el > 10*time.Second {
		t.Errorf("rank 0 took %v to exit (the watchdog is 30s; a closed connection is immediate)", el)
	}
	from := latestStep(dir)
	if from >= steps {
		t.Fatalf("the run finished (step %d) before the kill", from)
	}

	j.Resume = true
	ps = launch(t, 2, j)
	var resumed [2]*train.Result
	for r, p := range ps {
		if resumed[r], err = p.wait(t, time.Minute); err != nil {
			t.Fatalf("resumed rank %d: %v", r, err)
		}
	}
	c := job(childJob{Steps: steps, ShardMode: "ring", Attention: j.Attention})
	c.Ranks = 2
	straight, err := Local(c, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for r, res := range resumed {
		if res.FirstStep != from || res.Step != steps {
			t.Fatalf("rank %d resumed steps %d..%d, want %d..%d", r, res.FirstStep, res.Step, from, steps)
		}
		if !slices.Equal(bitsOf(res.Losses), bitsOf(straight.Losses[from:])) {
			t.Errorf("rank %d: resumed losses\n%v\ndiffer from the straight run's\n%v", r, res.Losses,
				straight.Losses[from:])
		}
	}
	t.Logf("resumed at step %d; %d losses equal the straight run's bit for bit", from, steps-from)
}

// TestHungProcess: a rank that stops (SIGSTOP: alive, connections open, silent)
// is caught by the other's watchdog, which names it.
func TestHungProcess(t *testing.T) {
	dir := t.TempDir()
	j := childJob{Steps: 1000, ShardMode: "ring", Timeout: 2 * time.Second, CheckpointEvery: 1,
		CheckpointDir: dir, Attention: driver.AttentionOptions{Mode: "dense"}}
	ps := launch(t, 2, j)
	waitForStep(t, ps[0], dir, 1, "the stop") // past the rendezvous and the build, into the steps
	stopped := time.Now()
	ps[1].cmd.Process.Signal(syscall.SIGSTOP)
	_, err := ps[0].wait(t, 30*time.Second)
	el := time.Since(stopped)
	ps[1].cmd.Process.Signal(syscall.SIGKILL)
	t.Logf("rank 0 exited %v after rank 1 stopped: %v", el, err)
	if err == nil || !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "watchdog") {
		t.Errorf("rank 0: %v, want a watchdog error naming rank 1", err)
	}
	if el > 10*time.Second {
		t.Errorf("rank 0 took %v (watchdog 2s)", el)
	}
}
