package tcp

import (
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/runtime/comm/commtest"
	"github.com/lcc-dev/lcc/runtime/comm/rendezvous"
)

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// mesh connects n ranks over loopback, one goroutine each.
func mesh(t *testing.T, n int, watchdog time.Duration) []*Comm {
	t.Helper()
	addr := freeAddr(t)
	cs := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			cs[r], errs[r] = Connect(Config{Config: rendezvous.Config{Addr: addr, Rank: r, Size: n,
				Timeout: 10 * time.Second}, Watchdog: watchdog})
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return cs
}

// TestConformance runs every collective over TCP on 1 to 4 ranks and compares
// each rank's results with the in-process communicator's, bit for bit.
func TestConformance(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		want, err := commtest.Reference(n)
		if err != nil {
			t.Fatal(err)
		}
		cs := mesh(t, n, 5*time.Second)
		got := make([][][]float64, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r, c := range cs {
			wg.Go(func() {
				got[r], errs[r] = commtest.Script(c)
				c.Close()
			})
		}
		wg.Wait()
		for r := range n {
			if errs[r] != nil {
				t.Fatalf("%d ranks: rank %d: %v", n, r, errs[r])
			}
			if d := commtest.Diff(r, got[r], want[r]); d != "" {
				t.Errorf("%d ranks: %s", n, d)
			}
		}
	}
}

// TestDeadPeer: a rank whose connections break without a goodbye (its process
// died) fails the others' waits at once, naming it, long before the watchdog.
func TestDeadPeer(t *testing.T) {
	cs := mesh(t, 3, time.Minute)
	start := time.Now()
	go func() {
		time.Sleep(100 * time.Millisecond)
		c := cs[1]
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		for _, p := range c.peers {
			if p != nil {
				p.conn.Close() // as the kernel does for a killed process
			}
		}
	}()
	var wg sync.WaitGroup
	for _, r := range []int{0, 2} {
		wg.Go(func() {
			// Rank 0 waits for rank 1; rank 2 waits for rank 0 (it hears of rank 1 too).
			src := map[int]int{0: 1, 2: 0}[r]
			_, err := cs[r].SendRecv("x", []float64{1}, src, src)
			if err == nil || !strings.Contains(err.Error(), "rank 1") {
				t.Errorf("rank %d: %v, want an error naming rank 1", r, err)
			}
			t.Logf("rank %d: %v", r, err)
		})
	}
	wg.Wait()
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("took %v", el)
	}
}

// TestSilentPeer: a rank that stops talking is caught by the watchdog.
func TestSilentPeer(t *testing.T) {
	cs := mesh(t, 2, 300*time.Millisecond)
	defer cs[1].Close()
	start := time.Now()
	_, err := cs[0].AllGather("gather", []int64{1}, []float64{1})
	if err == nil || !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "watchdog") {
		t.Errorf("got %v, want a watchdog error naming rank 1", err)
	}
	if el := time.Since(start); el < 300*time.Millisecond || el > 3*time.Second {
		t.Errorf("watchdog fired after %v, want 300ms", el)
	}
}

// TestAbortReason: a failing rank tells the others why.
func TestAbortReason(t *testing.T) {
	cs := mesh(t, 2, time.Minute)
	go func() {
		time.Sleep(50 * time.Millisecond)
		cs[1].Abort(errors.New("out of memory in node %7"))
	}()
	_, err := cs[0].AllReduce("sum", []int64{1}, []float64{1}, "sum")
	if err == nil || !strings.Contains(err.Error(), "rank 1 failed: out of memory in node %7") {
		t.Errorf("got %v", err)
	}
}

// TestMismatch: ranks in different collectives fail, naming both.
func TestMismatch(t *testing.T) {
	cs := mesh(t, 2, 5*time.Second)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r, op := range []string{"node_a", "node_b"} {
		wg.Go(func() {
			_, errs[r] = cs[r].AllGather(op, nil, []float64{1})
			if errs[r] != nil {
				cs[r].Abort(errs[r])
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "different programs") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestFinishedPeer: after a rank leaves cleanly, its queued data is still read,
// and a later wait on it fails at once saying it finished.
func TestFinishedPeer(t *testing.T) {
	cs := mesh(t, 2, time.Minute)
	if _, err := cs[1].SendRecv("last", []float64{42}, 0, 1); err != nil {
		t.Fatal(err)
	}
	cs[1].Close()
	x, err := cs[0].SendRecv("last", nil, 0, 1)
	if err != nil || len(x) != 1 || x[0] != 42 {
		t.Fatalf("queued frame: %v %v", x, err)
	}
	start := time.Now()
	_, err = cs[0].SendRecv("more", nil, 0, 1)
	if err == nil || !strings.Contains(err.Error(), "rank 1 has finished") || time.Since(start) > 2*time.Second {
		t.Errorf("got %v after %v", err, time.Since(start))
	}
	cs[0].Close()
}
