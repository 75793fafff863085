package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/lcc-dev/lcc/internal/userfile/fifotest"
)

// TestTrainStopsOnSignal: SIGTERM (and SIGINT) end lcc train after the step in
// flight with a checkpoint of it, exit 143 (130), and say where the checkpoint
// is; --resume continues from it, and --plot then draws the whole run.
func TestTrainStopsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		dir := t.TempDir()
		ck, metrics := filepath.Join(dir, "ck"), filepath.Join(dir, "m.jsonl")
		args := []string{"train", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--data=synthetic:copy",
			"--seq-len=16", "--steps=100000", "--progress-every=1", "--checkpoint-dir=" + ck,
			"--metrics=" + metrics}
		c := exec.Command(lccBin, args...)
		var stderr bytes.Buffer
		c.Stderr = &stderr
		out, err := c.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		for sc.Scan() && !strings.HasPrefix(sc.Text(), "step 3/") {
		}
		c.Process.Signal(sig)
		io.Copy(io.Discard, out)
		c.Wait()
		want := 128 + int(sig)
		m := regexp.MustCompile(`lcc: (SIGTERM|SIGINT): stopped after step (\d+); checkpoint: (\S+) ` +
			`\(continue with --resume\)\n$`).FindStringSubmatch(stderr.String())
		if code := c.ProcessState.ExitCode(); code != want || m == nil {
			t.Fatalf("%v: exit %d, want %d:\n%s", sig, code, want, stderr.String())
		}
		if _, err := os.Stat(m[3]); err != nil || filepath.Dir(m[3]) != ck {
			t.Errorf("the checkpoint %s named is not in %s: %v", m[3], ck, err)
		}
		if sig == syscall.SIGINT {
			continue
		}
		// The resumed run starts after that step; its plot covers steps 1 on.
		n, _ := strconv.Atoi(m[2])
		args[4] = "--steps=" + strconv.Itoa(n+3)
		plot := filepath.Join(dir, "loss.png")
		stdout, stderr2, code := lcc(t, append(args, "--resume", "--plot="+plot)...)
		if code != 0 || !strings.Contains(stdout, "resume: "+m[3]+" (step "+m[2]) ||
			strings.Contains(stderr2, "--plot draws steps") {
			t.Errorf("resume: exit %d:\n%s%s", code, stdout, stderr2)
		}
		if got, ok := metricsLosses(metrics, n+3); !ok {
			t.Errorf("the metrics after the resume hold %d steps, want 1..%d", len(got), n+3)
		}
	}
}

// TestResumeFolder: --resume from a folder that does not exist is an error (a
// mistyped path must not start a run from step 0); an empty folder starts one,
// with a warning.
func TestResumeFolder(t *testing.T) {
	dir := t.TempDir()
	args := []string{"train", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--data=synthetic:copy",
		"--seq-len=16", "--steps=1", "--resume"}
	missing := filepath.Join(dir, "chekpoints")
	_, stderr, code := lcc(t, append(args, "--checkpoint-dir="+missing)...)
	if code != 1 || !strings.Contains(stderr, "--resume: --checkpoint-dir "+missing+
		": no such file or directory (nothing to resume") {
		t.Errorf("missing folder: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("the missing folder was created")
	}
	empty := filepath.Join(dir, "empty")
	os.Mkdir(empty, 0o755)
	out, stderr, code := lcc(t, append(args, "--checkpoint-dir="+empty)...)
	if code != 0 || !strings.Contains(stderr, "lcc: warning: --resume: "+empty+
		" holds no checkpoint; starting from step 0") || !strings.Contains(out, "trained steps 1..1") {
		t.Errorf("empty folder: exit %d:\n%s%s", code, out, stderr)
	}
}

// TestOutputPathsCheckedFirst: every path lcc writes is checked before any
// work: a file where a folder is wanted, a folder where a file is, a plot
// format it cannot write, a folder it cannot create.
func TestOutputPathsCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, filepath.Join(dir, "file"), "x")
	model := filepath.Join(td, "onnx", "gpt_mini.onnx")
	train := []string{"train", model, "--data=synthetic:copy", "--seq-len=16", "--steps=1"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{append(train, "--checkpoint-dir="+file), "--checkpoint-dir " + file + ": is a file, not a folder"},
		{append(train, "--checkpoint-dir="+file+"/ck"), "--checkpoint-dir " + file + "/ck: cannot be created: " +
			file + " is a file"},
		{append(train, "--plot="+filepath.Join(dir, "loss.jpg")), "--plot " + filepath.Join(dir, "loss.jpg") +
			": want a .png, .svg or .pdf file"},
		{append(train, "--plot="+dir), "--plot " + dir + ": "},
		{append(train, "--plot="+file+"/loss.png"), "--plot " + file + "/loss.png: its folder " + file +
			": is a file, not a folder"},
		{append(train, "--metrics="+dir), "--metrics " + dir + ": is a folder; want a file name"},
		{[]string{"compile", model, "--seq-len=8", "-o", file}, "-o " + file + ": is a file, not a folder"},
		{[]string{"export", dir, "--format=safetensors", "-o", dir}, "-o " + dir + ": is a folder"},
		{[]string{"check", model, "--ref", filepath.Join(td, "ref", "gpt_mini.ref.safetensors"), "--outputs", dir},
			"--outputs " + dir + ": is a folder"},
		{[]string{"run", model, "--inputs", filepath.Join(td, "ref", "gpt_mini.ref.safetensors"), "--outputs",
			file + "/y.safetensors"}, "--outputs " + file + "/y.safetensors: its folder " + file + ": is a file"},
		{append(train, "--metrics="+fifotest.Make(t, dir, "pipe")), "--metrics " + filepath.Join(dir, "pipe") +
			": is a named pipe that no one reads"},
	} {
		out, stderr, code := lcc(t, c.args...)
		if code != 1 || !strings.Contains(stderr, c.want) || out != "" {
			t.Errorf("lcc %v: exit %d:\n%s%s\nwant %q before any output", c.args, code, out, stderr, c.want)
		}
	}
	// A folder that does not exist yet is fine, and is made for the file; so is
	// an existing file that can be written, /dev/null included.
	out, stderr, code := lcc(t, append(train, "--plot="+filepath.Join(dir, "new", "loss.png"),
		"--metrics=/dev/null")...)
	if code != 0 {
		t.Errorf("--plot in a new folder, --metrics=/dev/null: exit %d:\n%s%s", code, out, stderr)
	}
}
