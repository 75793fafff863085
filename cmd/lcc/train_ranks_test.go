package main

import (
	"bytes"
	"encoding/json"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// metricLosses reads the losses of a --metrics file.
func metricLosses(t *testing.T, path string) []float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []float64
	for line := range strings.Lines(string(b)) {
		var m struct{ Loss float64 }
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, m.Loss)
	}
	return out
}

// TestTrainRanks: `lcc train --device=cpu --ranks=2` reproduces the one-rank
// per-step losses within 1e-5 relative, with ring attention and with dilated
// attention whose long branch (16 > 8 tokens per rank) runs the sparse all-gather.
func TestTrainRanks(t *testing.T) {
	dir := t.TempDir()
	common := []string{"train", filepath.Join(td, "onnx", "llama_mini.onnx"), "--device=cpu",
		"--data=synthetic:copy", "--seq-len=16", "--batch=2", "--steps=3", "--lr=3e-3"}
	cases := []struct {
		name      string
		one, many []string
	}{
		{"ring", []string{"--attention=dense"}, []string{"--attention=ring", "--ranks=2"}},
		{"dilated", []string{"--attention=dilated", "--segments=4,16", "--dilations=1,2"},
			[]string{"--attention=dilated", "--segments=4,16", "--dilations=1,2", "--ranks=2"}},
	}
	for _, c := range cases {
		m1, m2 := filepath.Join(dir, c.name+"1.jsonl"), filepath.Join(dir, c.name+"2.jsonl")
		if out, stderr, code := lcc(t, append(append(common, c.one...), "--metrics="+m1)...); code != 0 {
			t.Fatalf("%s, 1 rank: exit %d\n%s%s", c.name, code, out, stderr)
		}
		if out, stderr, code := lcc(t, append(append(common, c.many...), "--metrics="+m2)...); code != 0 {
			t.Fatalf("%s, 2 ranks: exit %d\n%s%s", c.name, code, out, stderr)
		}
		a, b := metricLosses(t, m1), metricLosses(t, m2)
		if len(a) != 3 || len(b) != 3 {
			t.Fatalf("%s: %d and %d losses, want 3", c.name, len(a), len(b))
		}
		for i := range a {
			if d := math.Abs(a[i]-b[i]) / math.Abs(a[i]); !(d <= 1e-5) {
				t.Errorf("%s: step %d: loss %v on 2 ranks, %v on 1 (relative %.2g)", c.name, i+1, b[i],
					a[i], d)
			}
		}
	}
	// GPU ranks (one goroutine per GPU, NCCL) on a machine without GPUs: a clear
	// error naming the flag, not a panic.
	_, stderr, code := lcc(t, append(common, "--ranks=2", "--device=cuda")...)
	if code != 1 || !strings.Contains(stderr, "no NVIDIA driver") {
		t.Errorf("--ranks=2 --device=cuda: exit %d: %s", code, stderr)
	}
}

// TestTrainTwoProcesses starts two lcc processes as torchrun does (RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, a free MASTER_PORT): they meet
// through the rendezvous, train over TCP, and rank 0's per-step losses are the
// in-process --ranks=2 run's, bit for bit. Rank 1 prints nothing.
func TestTrainTwoProcesses(t *testing.T) {
	dir := t.TempDir()
	args := []string{"train", filepath.Join(td, "onnx", "llama_mini.onnx"), "--data=synthetic:copy",
		"--seq-len=16", "--batch=2", "--steps=3", "--attention=dilated", "--segments=4,16",
		"--dilations=1,2"}
	local := filepath.Join(dir, "local.jsonl")
	if out, stderr, code := lcc(t, append(args, "--ranks=2", "--metrics="+local)...); code != 0 {
		t.Fatalf("--ranks=2: exit %d\n%s%s", code, out, stderr)
	}
	metrics := filepath.Join(dir, "procs.jsonl")
	outs := launchRanks(t, 2, append(args, "--metrics="+metrics)...)
	a, b := metricLosses(t, local), metricLosses(t, metrics)
	if len(b) != 3 {
		t.Fatalf("%d losses from the processes, want 3", len(b))
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			t.Errorf("step %d: %v from two processes, %v from two goroutines", i+1, b[i], a[i])
		}
	}
	if !strings.Contains(outs[0].String(), "trained steps 1..3") || outs[1].Len() != 0 {
		t.Errorf("rank 0 printed %q, rank 1 %q", outs[0].String(), outs[1].String())
	}
	// A launcher environment that makes no sense is an error naming the variable.
	c := exec.Command(lccBin, args...)
	c.Env = append(os.Environ(), "WORLD_SIZE=2", "RANK=2", "MASTER_ADDR=127.0.0.1")
	out, _ := c.CombinedOutput()
	if c.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), "RANK=2: want < WORLD_SIZE=2") {
		t.Errorf("RANK=2 of 2: exit %d: %s", c.ProcessState.ExitCode(), out)
	}
}

// launchRanks runs lcc with args as n processes started the way torchrun starts
// them (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, a free MASTER_PORT)
// and returns what each printed, once all have exited 0.
func launchRanks(t *testing.T, n int, args ...string) []bytes.Buffer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	procs := make([]*exec.Cmd, n)
	outs := make([]bytes.Buffer, n)
	for r := range procs {
		c := exec.Command(lccBin, args...)
		c.Env = append(os.Environ(), "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n),
			"LOCAL_RANK="+strconv.Itoa(r), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port)
		c.Stdout, c.Stderr = &outs[r], &outs[r]
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		procs[r] = c
	}
	for r, c := range procs {
		if err := c.Wait(); err != nil {
			t.Fatalf("rank %d: %v\n%s", r, err, outs[r].String())
		}
	}
	return outs
}

// TestTrainLauncherRanks: WORLD_SIZE is the rank count, so ring attention under
// a launcher needs no --ranks; --ranks=0 is refused.
func TestTrainLauncherRanks(t *testing.T) {
	args := []string{"train", filepath.Join(td, "onnx", "llama_mini.onnx"), "--data=synthetic:copy",
		"--seq-len=16", "--steps=1", "--attention=ring", "--device=cpu"}
	outs := launchRanks(t, 2, args...)
	if !strings.Contains(outs[0].String(), "trained steps 1..1") {
		t.Errorf("rank 0 printed %q", outs[0].String())
	}
	for _, c := range []struct{ flag, want string }{
		{"--ranks=0", "--ranks 0: want a positive integer"},
		{"--warmup=5 --ranks=2", "--warmup 5: want <= --steps (1)"},
	} {
		_, stderr, code := lcc(t, append(args, strings.Fields(c.flag)...)...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d: %s, want %q", c.flag, code, stderr, c.want)
		}
	}
}

// TestCompileRanksProgram: a sharded lcc compile names rank 0's program, whose
// ring kernels and collectives it lists, and lcc train --ranks with the same
// flags prints the same program hash (rank 0 prints); --rank=1 names rank 1's.
func TestCompileRanksProgram(t *testing.T) {
	flags := []string{"--seq-len=16", "--batch=2", "--attention=ring", "--ranks=2"}
	model := filepath.Join(td, "onnx", "llama_mini.onnx")
	rep, stderr, code := lcc(t, append([]string{"compile", model}, flags...)...)
	if code != 0 {
		t.Fatalf("compile: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"rank       0 of 2:", " ring_fwd_", " nccl_send_recv", " nccl_all_reduce",
		"attn kern  ring_attention ×2"} {
		if !strings.Contains(rep, want) {
			t.Errorf("the compile report lacks %q:\n%s", want, rep)
		}
	}
	out, stderr, code := lcc(t, append([]string{"train", model, "--device=cpu", "--data=synthetic:copy",
		"--steps=1"}, flags...)...)
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	h0, h1 := programLine.FindStringSubmatch(rep), programLine.FindStringSubmatch(out)
	if h0 == nil || h1 == nil || h0[1] != h1[1] {
		t.Errorf("program hashes differ or are missing: compile %v, train --ranks=2 %v", h0, h1)
	}
	// --rank=1 names rank 1's program, another one.
	rep1, stderr, code := lcc(t, append([]string{"compile", model, "--rank=1"}, flags...)...)
	h2 := programLine.FindStringSubmatch(rep1)
	if code != 0 || !strings.Contains(rep1, "rank       1 of 2:") || h2 == nil || h0 == nil || h2[1] == h0[1] {
		t.Errorf("--rank=1: exit %d, hash %v (rank 0's %v): %s%s", code, h2, h0, rep1, stderr)
	}
}
