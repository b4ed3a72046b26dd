package relay

import (
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestIdleRelaysHoldNoPipes: each relayed connection cost its process six
// descriptors: its two sockets and, for each direction, the splice pipe
// io.Copy holds (from Go's pool) for the copy's whole length, idle or not.
// toybox-entry ran out at about 3300 idle connections under a limit of
// 20000 and lost its capability connection with them. A relay holds a
// pipe only while bytes move through it: idle, a connection costs its two
// sockets.
func TestIdleRelaysHoldNoPipes(t *testing.T) {
	const n = 50
	type end struct{ a, b net.Conn }
	var ends []end
	var done []chan struct{}
	defer func() {
		for _, e := range ends {
			_ = e.a.Close()
			_ = e.b.Close()
		}
		for _, d := range done {
			<-d
		}
	}()
	// The relays' own sockets (pa, pb) are counted; the test's ends (a, b)
	// are the client's and the remote's, which other processes would hold.
	var relays []net.Conn
	for range n {
		a, pa := tcpPair(t)
		pb, b := tcpPair(t)
		ends = append(ends, end{a, b})
		relays = append(relays, pa, pb)
	}
	before := openFDs(t)
	for i := 0; i < len(relays); i += 2 {
		d := make(chan struct{})
		done = append(done, d)
		go func() { _, _, _ = Pair(relays[i], relays[i+1]); close(d) }()
	}
	// Bytes through each, then idle.
	for _, e := range ends {
		if _, err := e.a.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		_ = e.b.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(e.b, buf); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	extra := openFDs(t) - before
	if extra > 2*16+8 {
		t.Errorf("%d idle relays hold %d descriptors beyond their sockets; want at most the 16 free pipes of the pool (%d)", n, extra, 2*16)
	}
	t.Logf("%d idle relays: %d descriptors beyond their sockets", n, extra)
}

// TestCopyWithoutPipes: with every pipe the pool may open taken (or no
// descriptor left for one), a relay still moves every byte, through a
// buffer.
func TestCopyWithoutPipes(t *testing.T) {
	var taken []pipe
	for {
		p, ok := getPipe()
		if !ok {
			break
		}
		taken = append(taken, p)
	}
	defer func() {
		for _, p := range taken {
			putPipe(p)
		}
	}()
	if len(taken) == 0 {
		t.Fatal("the pool gave no pipe at all")
	}
	a, pa := tcpPair(t)
	pb, b := unixPair(t)
	defer a.Close()
	defer b.Close()
	done := make(chan struct{})
	var ab int64
	go func() { ab, _, _ = Pair(pa, pb); close(done) }()
	payload := make([]byte, 3<<20)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	go func() {
		_, _ = a.Write(payload)
		_ = a.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(b)
	if err != nil || len(got) != len(payload) || string(got) != string(payload) {
		t.Fatalf("read %d bytes, %v; want the %d-byte payload", len(got), err, len(payload))
	}
	_ = b.(*net.UnixConn).CloseWrite()
	<-done
	if ab != int64(len(payload)) {
		t.Errorf("Pair moved %d bytes; want %d", ab, len(payload))
	}
}
