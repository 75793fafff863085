package rendezvous

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestExchange: every rank gets every card, rank 0's first (the NCCL id), the
// same token, and the host each rank connected from.
func TestExchange(t *testing.T) {
	addr := freeAddr(t)
	const n = 4
	res := make([]*Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			res[r], errs[r] = Exchange(Config{Addr: addr, Rank: r, Size: n, Timeout: 5 * time.Second},
				[]byte{byte('a' + r)})
		})
	}
	wg.Wait()
	for r := range n {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if res[r].Token != res[0].Token {
			t.Errorf("rank %d: token differs", r)
		}
		for s, p := range res[r].Peers {
			if string(p.Card) != string(rune('a'+s)) || p.Host != "127.0.0.1" {
				t.Errorf("rank %d: peer %d = %+v", r, s, p)
			}
		}
	}
}

// TestMissingRank: rank 0 names the ranks that never came, within its timeout,
// and a rank with no rank 0 says whom it could not reach.
func TestMissingRank(t *testing.T) {
	addr := freeAddr(t)
	var wg sync.WaitGroup
	var err1 error
	wg.Go(func() {
		_, err1 = Exchange(Config{Addr: addr, Rank: 1, Size: 3, Timeout: 2 * time.Second}, nil)
	})
	start := time.Now()
	_, err := Exchange(Config{Addr: addr, Rank: 0, Size: 3, Timeout: 500 * time.Millisecond}, nil)
	wg.Wait()
	if err == nil || !strings.Contains(err.Error(), "for ranks 2") {
		t.Errorf("rank 0: %v", err)
	}
	if err1 == nil || !strings.Contains(err1.Error(), "rank 0 failed the rendezvous") {
		t.Errorf("rank 1: %v", err1)
	}
	if time.Since(start) > 3*time.Second {
		t.Errorf("took %v", time.Since(start))
	}
	_, err = Exchange(Config{Addr: freeAddr(t), Rank: 1, Size: 2, Timeout: 300 * time.Millisecond}, nil)
	if err == nil || !strings.Contains(err.Error(), "cannot reach rank 0") {
		t.Errorf("no rank 0: %v", err)
	}
}

// TestSizeMismatch: ranks launched with different world sizes fail, saying so.
func TestSizeMismatch(t *testing.T) {
	addr := freeAddr(t)
	var wg sync.WaitGroup
	var err1 error
	wg.Go(func() {
		_, err1 = Exchange(Config{Addr: addr, Rank: 1, Size: 3, Timeout: 2 * time.Second}, nil)
	})
	_, err := Exchange(Config{Addr: addr, Rank: 0, Size: 2, Timeout: 2 * time.Second}, nil)
	wg.Wait()
	if err == nil || !strings.Contains(err.Error(), "world size 3, rank 0 has 2") {
		t.Errorf("rank 0: %v", err)
	}
	if err1 == nil || !strings.Contains(err1.Error(), "world size 3") {
		t.Errorf("rank 1: %v", err1)
	}
}

// TestStrayConnection: a connection that says nothing, or not lcc's hello, is
// dropped, and the real ranks still meet.
func TestStrayConnection(t *testing.T) {
	addr := freeAddr(t)
	var wg sync.WaitGroup
	var err0 error
	wg.Go(func() {
		_, err0 = Exchange(Config{Addr: addr, Rank: 0, Size: 2, Timeout: 10 * time.Second}, nil)
	})
	var stray net.Conn
	for range 100 { // rank 0 may not listen yet
		var err error
		if stray, err = net.Dial("tcp", addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if stray == nil {
		t.Fatal("rank 0 never listened")
	}
	defer stray.Close()
	stray.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	_, err1 := Exchange(Config{Addr: addr, Rank: 1, Size: 2, Timeout: 10 * time.Second}, nil)
	wg.Wait()
	if err0 != nil || err1 != nil {
		t.Errorf("rank 0: %v; rank 1: %v", err0, err1)
	}
}
