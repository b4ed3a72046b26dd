package entry

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Connects granted under another scheme alone. A grant may name a scheme
// ({"scheme":"https","host":"api.example","port":443}): the switchboard
// then admits a connect only as that scheme, and for https only with the
// stream's TLS ClientHello in hand, whose SNI it checks against the host
// (ARCHITECTURE.md, Labels). At connect() no byte of the stream exists
// yet. So when the Handle refuses plain tcp for its scheme alone, the
// entry does not decide anything: the connector connects the app's own
// socket to the entry's scheme listener inside the wall, connect()
// returns, and the entry reads what the stream opens with, exactly as for
// a forwarded port (Proxy.forwardConn): a ClientHello is asked for as
// https (the switchboard checks its SNI and sends it first), anything
// else is read as HTTP requests and asked for as http. The bytes are
// then relayed by the entry (splice), not handed over.

const (
	// schemeClaimWait bounds how long an accepted connection waits for
	// the notifier to say whose it is (the connector's connect returns
	// before the notifier records it).
	schemeClaimWait = 2 * time.Second
	// schemePendingAge is how long a record waits for its connection to
	// be accepted before it is dropped.
	schemePendingAge = time.Minute
	// maxSchemeTargets bounds the targets remembered as granted under
	// another scheme alone (past it, each connect asks tcp first again).
	maxSchemeTargets = 4096
)

// schemes holds the targets granted under another scheme alone and the
// connections put through the scheme listener, by the app socket's local
// address, until the entry accepts them.
type schemes struct {
	addr netip.AddrPort // the scheme listener, in the wall

	mu      sync.Mutex
	cond    *sync.Cond
	targets map[target]bool
	pending map[netip.AddrPort]pendingScheme
}

type pendingScheme struct {
	t  target
	at time.Time
}

func newSchemes(addr netip.AddrPort) *schemes {
	s := &schemes{addr: addr, targets: map[target]bool{}, pending: map[netip.AddrPort]pendingScheme{}}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// only reports whether plain tcp to t was refused for its scheme alone
// before (a vat's grant does not change while its wall runs).
func (s *schemes) only(t target) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.targets[t]
}

func (s *schemes) setOnly(t target) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.targets) < maxSchemeTargets {
		s.targets[t] = true
	}
}

// put records that the connection from local is the app's connect to t.
func (s *schemes) put(local netip.AddrPort, t target) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for a, p := range s.pending {
		if now.Sub(p.at) > schemePendingAge {
			delete(s.pending, a)
		}
	}
	s.pending[local] = pendingScheme{t: t, at: now}
	s.cond.Broadcast()
}

// claim returns the target of the connection from remote, waiting up to
// schemeClaimWait for the notifier to record it.
func (s *schemes) claim(remote netip.AddrPort) (target, bool) {
	deadline := time.Now().Add(schemeClaimWait)
	timer := time.AfterFunc(schemeClaimWait, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer timer.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if p, ok := s.pending[remote]; ok {
			delete(s.pending, remote)
			return p.t, true
		}
		if !time.Now().Before(deadline) {
			return target{}, false
		}
		s.cond.Wait()
	}
}

// throughScheme connects the app's socket to the scheme listener for t
// and answers the app's connect() with that connect's result.
func (n *notifier) throughScheme(sn seccompNotif, sock int, sa []byte, t target) {
	errno := n.conn.connect(sock, rewriteInet(sa, n.schemes.addr))
	if errno != 0 && errno != unix.EINPROGRESS {
		n.answer(sn.ID, unix.ECONNREFUSED)
		return
	}
	local, err := unix.Getsockname(sock)
	ap, ok := sockaddrAddrPort(local)
	if err != nil || !ok {
		n.answer(sn.ID, unix.ECONNREFUSED)
		return
	}
	n.schemes.put(ap, t)
	n.answer(sn.ID, errno)
}

func sockaddrAddrPort(sa unix.Sockaddr) (netip.AddrPort, bool) {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)), true
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port)), true
	}
	return netip.AddrPort{}, false
}

// serveSchemes serves the scheme listener: each connection is carried as
// a forwarded port's granted under another scheme alone.
func (n *notifier) serveSchemes(ctx context.Context, l net.Listener) {
	p := n.p
	_ = acceptLoop(ctx, l, p.logger, func(c net.Conn) {
		p.gate.admit(c, func() {
			tc, ok := c.(*net.TCPConn)
			if !ok {
				_ = c.Close()
				return
			}
			remote := tc.RemoteAddr().(*net.TCPAddr).AddrPort()
			t, ok := n.schemes.claim(netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port()))
			if !ok {
				_ = c.Close() // not a connect the notifier put here
				return
			}
			fw := &forward{t: t}
			fw.schemed.Store(true)
			p.forwardConn(ctx, tc, fw)
		}, nil)
	})
}
