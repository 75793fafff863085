package rendezvous

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"slices"
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

// dialRank0 connects to rank 0 as a stranger would, retrying until it listens,
// and reads its challenge.
func dialRank0(t *testing.T, addr string) (net.Conn, [16]byte) {
	t.Helper()
	for range 200 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		var ch [len(magic) + 16]byte
		if _, err := io.ReadFull(c, ch[:]); err != nil || string(ch[:len(magic)]) != magic {
			t.Fatalf("rank 0's challenge: %q, %v", ch, err)
		}
		return c, [16]byte(ch[len(magic):])
	}
	t.Fatal("rank 0 never listened")
	return nil, [16]byte{}
}

// meet runs rank 0 and, once strangers has run against rank 0's address, rank
// 1, both with secret, and returns their errors, how long rank 0 took, and the
// connections rank 0 logged as refused.
func meet(t *testing.T, secret string, timeout time.Duration, strangers func(addr string)) (
	err0, err1 error, took time.Duration, refused []string) {
	t.Helper()
	addr := freeAddr(t)
	var mu sync.Mutex
	logf := func(msg string) {
		mu.Lock()
		refused = append(refused, msg)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		_, err0 = Exchange(Config{Addr: addr, Rank: 0, Size: 2, Timeout: timeout, Secret: []byte(secret),
			Log: logf}, []byte("0"))
		took = time.Since(start)
	})
	strangers(addr)
	_, err1 = Exchange(Config{Addr: addr, Rank: 1, Size: 2, Timeout: timeout, Secret: []byte(secret)},
		[]byte("1"))
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return err0, err1, took, slices.Clone(refused)
}

// TestSilentStrangers (issue #23): connections that never speak are served
// beside the real ranks, not before them. Fifteen silent ones used to delay the
// start by 5 s each and push the last rank past the window.
func TestSilentStrangers(t *testing.T) {
	var silent []net.Conn
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	err0, err1, took, _ := meet(t, "", 20*time.Second, func(addr string) {
		for range 15 {
			c, _ := dialRank0(t, addr)
			silent = append(silent, c)
		}
	})
	if err0 != nil || err1 != nil {
		t.Fatalf("rank 0: %v; rank 1: %v", err0, err1)
	}
	if took > 3*time.Second {
		t.Errorf("15 silent connections delayed the rendezvous to %v", took)
	}
}

// TestFlood: more silent strangers than rank 0 awaits at once make it close
// the extra connections unread; a rank that meets such a close dials again, and
// gets in once the strangers' hello deadline frees their places. Rank 0 logs a
// bounded number of the refusals.
func TestFlood(t *testing.T) {
	defer func(d time.Duration) { helloTimeout = d }(helloTimeout)
	helloTimeout = 500 * time.Millisecond
	var silent []net.Conn
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	err0, err1, took, refused := meet(t, "", 20*time.Second, func(addr string) {
		for len(silent) < maxPending+40 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			silent = append(silent, c)
		}
	})
	if err0 != nil || err1 != nil {
		t.Fatalf("rank 0: %v; rank 1: %v", err0, err1)
	}
	if took > 10*time.Second || len(refused) > maxRecorded+1 || len(refused) < maxRecorded {
		t.Errorf("took %v, logged %d refusals", took, len(refused))
	}
}

// TestForgedHellos (issue #23): a hello with the right magic but an impossible
// world size or rank, or garbage, is refused and logged; it no longer aborts
// rank 0, and the real ranks meet.
func TestForgedHellos(t *testing.T) {
	forge := func(addr string, h hello) string {
		c, challenge := dialRank0(t, addr)
		defer c.Close()
		h.mac = helloMAC(nil, challenge, &h)
		c.Write(h.encode())
		res, err := decodeReply(bufio.NewReader(c), int(h.size), nil, h.nonce)
		if err == nil {
			t.Errorf("forged hello %+v was answered: %+v", h, res)
			return ""
		}
		return err.Error()
	}
	var told []string
	err0, err1, _, refused := meet(t, "", 20*time.Second, func(addr string) {
		told = append(told, forge(addr, hello{rank: 1, size: 3}), forge(addr, hello{rank: 99, size: 2}),
			forge(addr, hello{rank: 0, size: 2}))
		c, _ := dialRank0(t, addr)
		c.Write([]byte(magic + "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff")) // a card of 4 GiB
		c.Close()
	})
	if err0 != nil || err1 != nil {
		t.Fatalf("rank 0: %v; rank 1: %v", err0, err1)
	}
	for i, want := range []string{"world size 3, rank 0 has 2", "says it is rank 99 of 2", "says it is rank 0 of 2"} {
		if i >= len(told) || !strings.Contains(told[i], want) || !strings.Contains(told[i], "refused") {
			t.Errorf("forger %d was told %q, want %q", i, told, want)
		}
		if !slices.ContainsFunc(refused, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("rank 0 did not log %q: %q", want, refused)
		}
	}
	if !slices.ContainsFunc(refused, func(s string) bool { return strings.Contains(s, "sent no hello") }) {
		t.Errorf("rank 0 did not log the garbage hello: %q", refused)
	}
}

// TestForgedRankWithSecret (issue #23): with a shared secret, a stranger's
// hello for rank 1 that comes first and stays open does not take the rank.
func TestForgedRankWithSecret(t *testing.T) {
	var forged net.Conn
	err0, err1, _, refused := meet(t, "s3cret", 20*time.Second, func(addr string) {
		c, challenge := dialRank0(t, addr)
		forged = c
		h := hello{rank: 1, size: 2, card: []byte("evil")}
		h.mac = helloMAC([]byte("guess"), challenge, &h)
		c.Write(h.encode())
		// Wait for rank 0's answer (a refusal or a hang-up) before the real rank 1
		// comes: on a loaded machine rank 0 could otherwise meet rank 1 before it
		// reads the forged hello, and log the hang-up of an unread one instead.
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		c.Read(make([]byte, 1))
		c.SetReadDeadline(time.Time{})
	})
	defer forged.Close()
	if err0 != nil || err1 != nil {
		t.Fatalf("rank 0: %v; rank 1: %v", err0, err1)
	}
	if len(refused) != 1 || !strings.Contains(refused[0], "shared secret") {
		t.Errorf("refused %q", refused)
	}
}

// TestForgedRankHangsUp: without a secret, a forged hello for rank 1 that
// hangs up before the exchange ends frees the rank for the real one.
func TestForgedRankHangsUp(t *testing.T) {
	addr := freeAddr(t)
	var refused []string
	var mu sync.Mutex
	cfg := Config{Addr: addr, Size: 3, Timeout: 10 * time.Second, Log: func(msg string) {
		mu.Lock()
		refused = append(refused, msg)
		mu.Unlock()
	}}
	errs := make([]error, 3)
	var wg sync.WaitGroup
	wg.Go(func() { _, errs[0] = Exchange(cfg, nil) })
	c, challenge := dialRank0(t, addr)
	h := hello{rank: 1, size: 3, card: []byte("evil")}
	h.mac = helloMAC(nil, challenge, &h)
	c.Write(h.encode())
	time.Sleep(200 * time.Millisecond) // rank 0 takes it as rank 1
	c.Close()
	time.Sleep(200 * time.Millisecond)
	for r := 1; r < 3; r++ {
		wg.Go(func() { c := cfg; c.Rank = r; _, errs[r] = Exchange(c, nil) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if !slices.ContainsFunc(refused, func(s string) bool { return strings.Contains(s, "closed its connection") }) {
		t.Errorf("refused %q", refused)
	}
}

// TestDuplicateRank: two live processes saying they are rank 1: the second is
// refused and told so, rank 0 goes on and names it when it times out.
func TestDuplicateRank(t *testing.T) {
	addr := freeAddr(t)
	var wg sync.WaitGroup
	var err0, first error
	cfg := Config{Addr: addr, Size: 3, Timeout: 4 * time.Second, Log: func(string) {}}
	wg.Go(func() { _, err0 = Exchange(cfg, nil) })
	// The first rank 1 waits longer than rank 0, so it hears why rank 0 gave up.
	wg.Go(func() { c := cfg; c.Rank, c.Timeout = 1, 8*time.Second; _, first = Exchange(c, nil) })
	// Time for the first rank 1 to join before the second comes, with margin for a
	// loaded machine (2 cores shared with other test binaries).
	time.Sleep(1500 * time.Millisecond)
	c := cfg
	c.Rank = 1
	_, second := Exchange(c, nil)
	wg.Wait()
	if second == nil || !strings.Contains(second.Error(), "rank 1 is taken") {
		t.Errorf("second rank 1: %v", second)
	}
	if err0 == nil || !strings.Contains(err0.Error(), "for ranks 2") || !strings.Contains(err0.Error(), "rank 1 is taken") {
		t.Errorf("rank 0: %v", err0)
	}
	if first == nil || !strings.Contains(first.Error(), "rank 0 failed the rendezvous") {
		t.Errorf("first rank 1: %v", first)
	}
}

// TestWrongSecret: a rank with another secret is refused and told to compare
// LCC_COMM_SECRET; a rank 0 without the secret is not trusted by a rank with it.
func TestWrongSecret(t *testing.T) {
	addr := freeAddr(t)
	var wg sync.WaitGroup
	var err0 error
	wg.Go(func() {
		_, err0 = Exchange(Config{Addr: addr, Size: 2, Timeout: time.Second, Secret: []byte("a"),
			Log: func(string) {}}, nil)
	})
	_, err1 := Exchange(Config{Addr: addr, Rank: 1, Size: 2, Timeout: time.Second, Secret: []byte("b")}, nil)
	wg.Wait()
	for _, err := range []error{err0, err1} {
		if err == nil || !strings.Contains(err.Error(), SecretVar) {
			t.Errorf("got %v, want an error naming %s", err, SecretVar)
		}
	}
}

// FuzzDecodeHello: the hello decoder, which reads bytes from anyone who can
// reach rank 0, returns a hello or an error for every input, never allocates
// past maxCard, and a hello it decodes encodes back to the bytes it read.
//
//	go test -run='^$' -fuzz=FuzzDecodeHello -fuzztime=30s ./runtime/comm/rendezvous/
func FuzzDecodeHello(f *testing.F) {
	h := hello{rank: 1, size: 2, card: []byte("29501")}
	h.mac = helloMAC([]byte("k"), [16]byte{1}, &h)
	f.Add(h.encode())
	f.Add([]byte(magic))
	f.Add([]byte(magic + "\x01\x00\x00\x00\x02\x00\x00\x00\xff\xff\xff\x7f"))
	f.Add([]byte("GET / HTTP/1.0\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		h, err := decodeHello(r)
		if err != nil {
			return
		}
		if len(h.card) > maxCard {
			t.Fatalf("a card of %d bytes", len(h.card))
		}
		if n := len(data) - r.Len(); !bytes.Equal(h.encode(), data[:n]) {
			t.Fatalf("hello %+v encodes to %x, read from %x", h, h.encode(), data[:n])
		}
	})
}
