package relay

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"toybox/tests/testenv"
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
	payload := sendPattern(a)
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

// pipeSize is the capacity of p as the kernel reports it.
func pipeSize(t *testing.T, p pipe) int {
	t.Helper()
	n, err := unix.FcntlInt(uintptr(p.w), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPoolGrowsPipes: the pool's pipes kept the default 64 KiB, so a
// relayed gigabyte took 32768 splice(2) calls where Go's own io.Copy takes
// 2048 (it grows its pipes to 1 MiB): toybox-entry made 31 000 splices per
// GB (perf stat on it during bench -only bulk) and its proxy ran at 0.6× a
// plain Go proxy. The first BigPipes pipes open at once are grown to
// bigPipeSize, and no more: a grown pipe can hold a MiB in flight, and its
// size counts against the user's pipe pages, which the app shares.
func TestPoolGrowsPipes(t *testing.T) {
	var taken []pipe
	defer func() {
		for _, p := range taken {
			putPipe(p)
		}
	}()
	big := 0
	for {
		p, ok := getPipe()
		if !ok {
			break
		}
		taken = append(taken, p)
		size := pipeSize(t, p)
		if p.big != (size == bigPipeSize) {
			t.Errorf("pipe %d: big %v, size %d", len(taken), p.big, size)
		}
		if p.big {
			big++
		}
		if len(taken) == 1 && size != bigPipeSize {
			t.Errorf("the first pipe from the pool holds %d bytes; want %d", size, bigPipeSize)
		}
	}
	if big != BigPipes {
		t.Errorf("%d of %d pipes open at once hold %d bytes; want %d", big, len(taken), bigPipeSize, BigPipes)
	}
	// A grown pipe given back is the one the next taker gets.
	putPipe(taken[0])
	p, ok := getPipe()
	taken[0] = p
	if !ok || !p.big {
		t.Errorf("getPipe after a grown pipe came back = %+v, %v; want a grown pipe", p, ok)
	}
}

// pipeUserEnv names the child TestPipeBudgetFallback runs as another user.
const pipeUserEnv = "RELAY_TEST_PIPE_USER"

func TestMain(m *testing.M) {
	if os.Getenv(pipeUserEnv) == "1" {
		os.Exit(pipeUserChild())
	}
	os.Exit(m.Run())
}

// TestPipeBudgetFallback: a user whose pipes already hold its pipe pages
// (fs.pipe-user-pages-soft) may not grow a pipe: F_SETPIPE_SZ answers
// EPERM. toybox-entry runs as its vat's uid, and its app may have used the
// budget up. The pool then keeps the size the kernel gave, and a relay
// still moves every byte. The child runs as an unused uid: the kernel
// counts pipe pages per user.
func TestPipeBudgetFallback(t *testing.T) {
	testenv.RequireRoot(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The child's uid must reach the binary.
	dir := t.TempDir()
	for d := dir; d != filepath.Dir(d) && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "relay.test")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	uid := uint32(3_000_000_000 + os.Getpid()%1_000_000)
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), pipeUserEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	t.Logf("child as uid %d:\n%s", uid, out)
	if err != nil {
		t.Fatalf("the child as uid %d: %v", uid, err)
	}
}

// pipeUserChild is TestPipeBudgetFallback's child: it takes a grown pipe,
// uses up its user's pipe pages with plain pipes, then relays 3 MiB with
// the pipes the pool can still make. It returns the exit status.
func pipeUserChild() int {
	fail := func(format string, a ...any) int {
		fmt.Printf("FAIL: "+format+"\n", a...)
		return 1
	}
	if os.Geteuid() == 0 {
		return fail("running as root")
	}
	first, ok := getPipe()
	if !ok || !first.big {
		return fail("the first pipe = %+v, %v; want one grown to %d bytes", first, ok, bigPipeSize)
	}
	// A pipe made past the budget gets the kernel's minimum (two pages).
	var hold [][2]int
	for {
		var fds [2]int
		if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
			return fail("making plain pipes: %v (after %d)", err, len(hold))
		}
		hold = append(hold, fds)
		n, err := unix.FcntlInt(uintptr(fds[1]), unix.F_GETPIPE_SZ, 0)
		if err != nil {
			return fail("F_GETPIPE_SZ: %v", err)
		}
		if n < 64<<10 {
			break
		}
		if len(hold) > 8192 {
			return fail("%d pipes and still no sign of the budget", len(hold))
		}
	}
	fmt.Printf("the budget was used up after %d plain pipes\n", len(hold))
	p, ok := getPipe()
	if !ok || p.big {
		return fail("getPipe past the budget = %+v, %v; want a pipe of the size the kernel gave", p, ok)
	}
	// p is kept (never given back): the relay below must make its own.
	n, err := unix.FcntlInt(uintptr(p.w), unix.F_GETPIPE_SZ, 0)
	fmt.Printf("a pool pipe past the budget holds %d bytes (%v)\n", n, err)

	a, pa, err := loopbackPair()
	if err != nil {
		return fail("%v", err)
	}
	pb, b, err := loopbackPair()
	if err != nil {
		return fail("%v", err)
	}
	done := make(chan int64)
	go func() { ab, _, _ := Pair(pa, pb); done <- ab }()
	payload := sendPattern(a)
	_ = b.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(b)
	if err != nil || !bytes.Equal(got, payload) {
		return fail("read %d bytes, %v; want the %d-byte payload", len(got), err, len(payload))
	}
	_ = b.(*net.TCPConn).CloseWrite()
	if ab := <-done; ab != int64(len(payload)) {
		return fail("Pair moved %d bytes; want %d", ab, len(payload))
	}
	pipes.Lock()
	grown := pipes.big
	pipes.Unlock()
	if grown != 1 {
		return fail("%d grown pipes open; want 1 (the first)", grown)
	}
	fmt.Println("ok")
	return 0
}

// loopbackPair is two ends of one loopback TCP connection, for the child
// (which has no *testing.T).
func loopbackPair() (net.Conn, net.Conn, error) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	ch := make(chan net.Conn, 1)
	go func() { c, _ := l.Accept(); ch <- c }()
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	return c, <-ch, nil
}

// sendPattern writes 3 MiB of a known pattern on a (a TCP connection),
// then half-closes it, from a goroutine of its own, and returns what it
// writes.
func sendPattern(a net.Conn) []byte {
	payload := make([]byte, 3<<20)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	go func() {
		_, _ = a.Write(payload)
		_ = a.(*net.TCPConn).CloseWrite()
	}()
	return payload
}
