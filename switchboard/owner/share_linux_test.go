//go:build linux

package owner

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"toybox/tests/dockertest"
	"toybox/tests/testenv"
)

// TestDiagMatchesProc: sock_diag and /proc/net/tcp{,6} report the same
// listeners (address as bound, port, uid, inode), and neither reports a
// connection.
func TestDiagMatchesProc(t *testing.T) {
	var ports []uint16
	listen := func(network, addr string) net.Listener {
		ln, err := net.Listen(network, addr)
		if err != nil {
			t.Fatalf("listen %s %s: %v", network, addr, err)
		}
		t.Cleanup(func() { ln.Close() })
		ports = append(ports, uint16(ln.Addr().(*net.TCPAddr).Port))
		return ln
	}
	lo := listen("tcp4", "127.0.0.1:0")
	listen("tcp4", "0.0.0.0:0")
	if ln, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		ln.Close()
		listen("tcp6", "[::1]:0")
		listen("tcp", "[::]:0")
	}
	// An established connection on a listener's port, both ends.
	c, err := net.Dial("tcp4", lo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := lo.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	ours := func(ls []Listener) []Listener {
		var out []Listener
		for _, l := range ls {
			if slices.Contains(ports, l.Port) {
				out = append(out, l)
			}
		}
		slices.SortFunc(out, func(a, b Listener) int { return cmp.Compare(a.Inode, b.Inode) })
		return out
	}
	v4, err := diagListeners(unix.AF_INET)
	if err != nil {
		t.Fatalf("sock_diag AF_INET: %v", err)
	}
	v6, err := diagListeners(unix.AF_INET6)
	if err != nil {
		t.Fatalf("sock_diag AF_INET6: %v", err)
	}
	diag := ours(append(v4, v6...))
	proc, err := procListeners()
	if err != nil {
		t.Fatal(err)
	}
	if want := ours(proc); !slices.Equal(diag, want) || len(diag) != len(ports) {
		t.Errorf("sock_diag: %v\n/proc: %v\n(%d listeners opened)", diag, want, len(ports))
	}
	if _, diagErr, err := readListeners(); diagErr != nil || err != nil {
		t.Errorf("readListeners: netlink %v, %v; want netlink used", diagErr, err)
	}
}

// TestConcurrentUncachedChecksShareLooks: a burst of checks of addresses
// never asked before (the storm a vat can raise) reads the listening
// sockets, the processes' descriptors and Docker about once, not once per
// check, and every check gets the decision a lone check would.
func TestConcurrentUncachedChecksShareLooks(t *testing.T) {
	testenv.RequireRoot(t) // a root listener, judged as one
	chk, err := New(Config{ToyboxUID: testUID, OwnRoots: []string{"/nonexistent-toybox"}, DockerHost: dockertest.DeadHost(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer chk.Close()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := netip.MustParseAddrPort(ln.Addr().String())
	free := freePort(t)

	const n = 256
	var wg sync.WaitGroup
	release := make(chan struct{})
	var wrong atomic.Int64
	storm := func(target netip.AddrPort, want string) {
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-release
				// A new vat name each time: never cached.
				d := chk.Check(context.Background(), target, fmt.Sprintf("v%d", i), true)
				if d.Allow || !strings.Contains(d.Reason, want) {
					if wrong.Add(1) == 1 {
						t.Errorf("Check(%s) = {%v, %q}; want a refusal: %q", target, d.Allow, d.Reason, want)
					}
				}
			}()
		}
		close(release)
		wg.Wait()
	}

	// Nothing listens: only the listening sockets are read.
	storm(netip.AddrPortFrom(held.Addr(), free), "nothing listens")
	tb, sc, dk := chk.table.builds.Load(), chk.scan.builds.Load(), chk.containers.builds.Load()
	t.Logf("%d checks of a free port: %d reads of the listeners, %d scans, %d docker questions", n, tb, sc, dk)
	if tb > 2 || sc != 0 || dk != 0 {
		t.Errorf("%d concurrent checks of a free port: %d reads of the listening sockets (want 1, at most 2), %d scans and %d docker questions (want 0)", n, tb, sc, dk)
	}

	// A root listener: the descriptors of every process are read, and
	// Docker (unreachable here) asked.
	release = make(chan struct{})
	storm(held, "docker cannot be asked")
	tb, sc, dk = chk.table.builds.Load()-tb, chk.scan.builds.Load(), chk.containers.builds.Load()
	t.Logf("%d checks of a root listener: %d reads of the listeners, %d scans, %d docker questions", n, tb, sc, dk)
	if tb > 2 || sc > 2 || dk > 2 {
		t.Errorf("%d concurrent checks of a held port: %d reads of the listening sockets, %d scans, %d docker questions; want about one each (at most 2)", n, tb, sc, dk)
	}
}

// BenchmarkCheckStorm: uncached checks asked by many callers at once (a
// new vat name each time, so the decision cache never answers), with the
// default cache TTL. builds/op is how many looks at the host each check
// cost: far below 1 when they are shared.
func BenchmarkCheckStorm(b *testing.B) {
	testenv.RequireRoot(b)
	for _, held := range []bool{false, true} {
		name := "free port"
		if held {
			name = "root listener"
		}
		b.Run(name, func(b *testing.B) {
			chk, err := New(Config{ToyboxUID: testUID, OwnRoots: []string{"/nonexistent-toybox"}, DockerHost: dockertest.DeadHost(b)})
			if err != nil {
				b.Fatal(err)
			}
			defer chk.Close()
			ln, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			target := netip.MustParseAddrPort(ln.Addr().String())
			if !held {
				target = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), target.Port())
			}
			var seq atomic.Int64
			b.SetParallelism(64)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					chk.Check(context.Background(), target, fmt.Sprintf("v%d", seq.Add(1)), true)
				}
			})
			b.ReportMetric(float64(chk.table.builds.Load()+chk.scan.builds.Load())/float64(b.N), "builds/op")
		})
	}
}

// TestCacheBounded: a storm of new addresses fills the decision cache to
// its bound and no further.
func TestCacheBounded(t *testing.T) {
	chk, err := New(Config{ToyboxUID: testUID, OwnRoots: []string{"/nonexistent-toybox"}, DockerHost: dockertest.DeadHost(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer chk.Close()
	target := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), freePort(t))
	for i := 0; i < maxCacheEntries+1000; i++ {
		chk.Check(context.Background(), target, fmt.Sprintf("v%d", i), true)
	}
	chk.mu.Lock()
	n := len(chk.cache)
	chk.mu.Unlock()
	if n > maxCacheEntries {
		t.Errorf("%d decisions cached; want at most %d", n, maxCacheEntries)
	}
}
