// Package killtest runs a test again in a child process and SIGKILLs it at the
// point the child announces: how the tests of checkpoints and metrics check that
// what a writer killed mid-way leaves behind still reads back. A SIGKILL runs no
// deferred code and no signal handler, so only what reached the disk counts.
package killtest

import (
	"bufio"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// Kill runs the test named test of this test binary again in a child process
// whose environment sets env=value, runs meanwhile (the parent's own work, which
// overlaps the child's), waits for the child's first line on stdout, SIGKILLs
// the child and returns that line. The child finds value with os.Getenv(env),
// prints its line at the point to be killed and then waits.
func Kill(t testing.TB, test, env, value string, meanwhile func()) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), env+"="+value)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Whatever happens next, the child does not outlive the test.
	defer cmd.Wait()
	defer cmd.Process.Signal(syscall.SIGKILL)
	if meanwhile != nil {
		meanwhile()
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	return line
}

// Here is the child's side: it prints line, which Kill returns, and waits to
// be killed. It never returns: a child that outlives a minute exits 3.
func Here(line string) {
	os.Stdout.WriteString(line + "\n")
	time.Sleep(time.Minute)
	os.Exit(3)
}
