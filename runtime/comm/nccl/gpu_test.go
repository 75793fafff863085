package nccl

// Tests named TestGPU* need a GPU and NCCL and skip, saying why, without them.

import (
	"errors"
	"github.com/lcc-dev/lcc/internal/gputest"
	"strings"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/runtime/comm/commtest"
	"github.com/lcc-dev/lcc/runtime/comm/rendezvous"
	"github.com/lcc-dev/lcc/runtime/comm/tcp"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

// oneRank opens GPU 0 and a one-rank NCCL communicator on it, or skips.
func oneRank(t *testing.T, opts Options) *Comm {
	t.Helper()
	dev, err := cuda.Open(0)
	if err != nil {
		gputest.Skipf(t, "skipping: no usable GPU: %v", err)
	}
	t.Cleanup(func() { dev.Close() })
	id, err := cuda.NCCLGetUniqueID()
	if err != nil {
		gputest.Skipf(t, "skipping: no usable NCCL: %v", err)
	}
	c, err := New(dev, 1, 0, id, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestGPUOneRankConformance runs every collective of the collective.Communicator interface
// through NCCL's GPU path (device staging, the NCCL stream, events, the
// watchdog) on one rank and compares with the in-process communicator, bit for
// bit (with one rank every collective is exact).
func TestGPUOneRankConformance(t *testing.T) {
	c := oneRank(t, Options{Timeout: 30 * time.Second})
	want, err := commtest.Reference(1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := commtest.Script(c)
	if err != nil {
		t.Fatal(err)
	}
	if d := commtest.Diff(0, got, want[0]); d != "" {
		t.Error(d)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
}

// TestGPUOneRankDeviceConformance runs commtest's device script (every device
// collective against the host, bit for bit), as runtime/comm/devlocal runs it,
// through NCCL on one rank.
func TestGPUOneRankDeviceConformance(t *testing.T) {
	c := oneRank(t, Options{Timeout: 30 * time.Second})
	dev, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if err := commtest.DeviceScript(dev, c, 1000); err != nil {
		t.Error(err)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
}

// TestGPUDeviceOverlap queues a device-level all-reduce behind a compute event
// and a compute-side wait on Done, then checks the result.
func TestGPUDeviceOverlap(t *testing.T) {
	c := oneRank(t, Options{Timeout: 30 * time.Second})
	defer c.Close()
	x := []float32{1, -2, 3.5, 1e-3}
	send, err := c.dev.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	defer c.dev.Free(send)
	recv, err := c.dev.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	defer c.dev.Free(recv)
	if err := cuda.CopyHtoD(c.dev, send, x); err != nil {
		t.Fatal(err)
	}
	if err := c.dev.Memset32(recv, 0x7fc00000, 4); err != nil { // poison
		t.Fatal(err)
	}
	compute, err := c.dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer compute.Destroy()
	ready, _ := c.dev.NewEvent()
	defer ready.Destroy()
	if err := ready.Record(compute); err != nil {
		t.Fatal(err)
	}
	if err := c.After(ready); err != nil {
		t.Fatal(err)
	}
	if err := c.AllReduceDevice("grad bucket 0", send, recv, 4, tensor.F32, cuda.Sum); err != nil {
		t.Fatal(err)
	}
	done, err := c.Done()
	if err != nil {
		t.Fatal(err)
	}
	defer done.Destroy()
	if err := compute.Wait(done); err != nil {
		t.Fatal(err)
	}
	if err := compute.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 4)
	if err := cuda.CopyDtoH(c.dev, got, recv); err != nil {
		t.Fatal(err)
	}
	for i := range x {
		if got[i] != x[i] {
			t.Errorf("element %d: %v, want %v", i, got[i], x[i])
		}
	}
	if err := c.Sync(); err != nil {
		t.Error(err)
	}
}

// TestGPUMonitorAborts: when the monitor reports a dead peer, the communicator
// is aborted (ncclCommAbort) and the next collective fails naming the peer.
func TestGPUMonitorAborts(t *testing.T) {
	m := &causeOf{}
	c := oneRank(t, Options{Timeout: 30 * time.Second, Monitor: m})
	defer c.Close()
	if _, err := c.AllReduce("before", []int64{1}, []float64{1}, "sum"); err != nil {
		t.Fatal(err)
	}
	m.err.Store(errors.New("the connection to rank 1 broke without its goodbye"))
	deadline := time.Now().Add(5 * time.Second)
	for c.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	_, err := c.AllReduce("after", []int64{1}, []float64{1}, "sum")
	if err == nil || !strings.Contains(err.Error(), "rank 1") {
		t.Errorf("after the monitor's report: %v", err)
	}
}

// TestGPUJoinOneRank starts a one-process NCCL run the way the multi-process
// runner does: rendezvous, TCP mesh, NCCL id through the mesh, NCCL init.
func TestGPUJoinOneRank(t *testing.T) {
	dev, err := cuda.Open(0)
	if err != nil {
		gputest.Skipf(t, "skipping: no usable GPU: %v", err)
	}
	defer dev.Close()
	if _, err := cuda.NCCLGetUniqueID(); err != nil {
		gputest.Skipf(t, "skipping: no usable NCCL: %v", err)
	}
	c, mesh, err := Join(dev, tcp.Config{Config: rendezvous.Config{Addr: "127.0.0.1:0", Rank: 0, Size: 1,
		Timeout: 10 * time.Second}, Watchdog: 10 * time.Second}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mesh.Close()
	defer c.Close()
	got, err := c.AllReduce("x", []int64{2}, []float64{1.5, -2}, "sum")
	if err != nil || got[0] != 1.5 || got[1] != -2 {
		t.Errorf("all_reduce: %v %v", got, err)
	}
}
