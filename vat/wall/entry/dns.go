package entry

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// The wall's DNS stub. It resolves nothing: to an A query for a name it
// answers an address of its own from fakeRange, one per name, which the
// notifier maps back to the name when the app connects to it. So the
// switchboard is asked for the name, decides on the name, resolves it
// itself and dials only what it vetted (no rebinding, the same rules as
// the proxy's). AAAA queries get NOERROR with no address (NODATA), and so
// do the other types: a resolver asking for both families (getaddrinfo
// with AF_UNSPEC, Node's lookup with all, Go's) has a definitive answer
// for IPv6 at once and uses the A answer, with no wait for a timeout.
// (The switchboard is asked for the name either way, and dials the
// family it vetted: a fake IPv6 range would add nothing but a second
// table.) It answers over UDP and over TCP (resolvers retry a truncated
// answer over TCP; some, with "options use-vc", use TCP alone).

// fakeRange is the benchmarking range (RFC 2544), never a real host's.
var fakeRange = netip.MustParsePrefix("198.18.0.0/15")

// dnsTTL is the answers' time to live: a name's address never changes
// while the wall runs.
const dnsTTL = 3600

// maxNames bounds the names one wall is handed addresses for (the range
// holds 131070).
const maxNames = 1 << 16

// names maps each name handed out to its address and back.
type names struct {
	mu     sync.Mutex
	byName map[string]netip.Addr
	byAddr map[netip.Addr]string
	next   netip.Addr
}

func newNames() *names {
	return &names{byName: map[string]netip.Addr{}, byAddr: map[netip.Addr]string{}, next: fakeRange.Addr().Next()}
}

// ErrNamesFull means the wall was handed maxNames addresses already.
var ErrNamesFull = errors.New("the wall's DNS stub has handed out all its addresses")

// addr returns name's address, handing one out the first time.
func (n *names) addr(name string) (netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if a, ok := n.byName[name]; ok {
		return a, nil
	}
	if len(n.byName) >= maxNames {
		return netip.Addr{}, ErrNamesFull
	}
	a := n.next
	n.next = a.Next()
	n.byName[name] = a
	n.byAddr[a] = name
	return a, nil
}

// name returns the name a was handed out for.
func (n *names) name(a netip.Addr) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s, ok := n.byAddr[a]
	return s, ok
}

// fake reports whether a is of the stub's range.
func (n *names) fake(a netip.Addr) bool { return fakeRange.Contains(a) }

// nameOK reports whether s may be asked of the switchboard: a DNS name
// of letters, digits, '-', '_' and dots, as ForwardHostOK, without
// an address's colons.
func nameOK(s string) bool {
	return s != "" && !strings.Contains(s, ":") && ForwardHostOK(s)
}

// serveDNS answers queries on pc until it is closed.
func serveDNS(pc net.PacketConn, ns *names, log *slog.Logger) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if out := answerDNS(buf[:n], ns, log); out != nil {
			_, _ = pc.WriteTo(out, from)
		}
	}
}

// DNS over TCP (RFC 7766): each message has a two-byte length before it.
const (
	maxDNSConns   = 64               // connections served at once; past it one waits for another to end
	dnsTCPIdle    = 10 * time.Second // an idle connection is closed (RFC 7766 §6.2.3 suggests seconds)
	maxDNSMessage = 1 << 16          // the length prefix's bound
)

// serveDNSTCP answers queries over TCP on l until it is closed.
func serveDNSTCP(l net.Listener, ns *names, log *slog.Logger) {
	sem := make(chan struct{}, maxDNSConns)
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			serveDNSConn(c, ns, log)
		}()
	}
}

// serveDNSConn answers the queries of one TCP connection, in order, until
// the client closes it, sends something that is not a query, or idles.
func serveDNSConn(c net.Conn, ns *names, log *slog.Logger) {
	defer c.Close()
	br := bufio.NewReader(c)
	var lb [2]byte
	buf := make([]byte, maxDNSMessage)
	for {
		_ = c.SetDeadline(time.Now().Add(dnsTCPIdle))
		if _, err := io.ReadFull(br, lb[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(lb[:]))
		if _, err := io.ReadFull(br, buf[:n]); err != nil {
			return
		}
		out := answerDNS(buf[:n], ns, log)
		if out == nil {
			return
		}
		msg := make([]byte, 2+len(out))
		binary.BigEndian.PutUint16(msg, uint16(len(out)))
		copy(msg[2:], out)
		if _, err := c.Write(msg); err != nil {
			return
		}
	}
}

// answerDNS returns the answer to one query (nil: none, not a query).
func answerDNS(q []byte, ns *names, log *slog.Logger) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return nil
	}
	question := qs[0]
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if h.OpCode != 0 {
		rh.RCode = dnsmessage.RCodeNotImplemented
	}
	name := strings.ToLower(strings.TrimSuffix(question.Name.String(), "."))
	var addr netip.Addr
	if rh.RCode == dnsmessage.RCodeSuccess && question.Class == dnsmessage.ClassINET {
		switch {
		case !nameOK(name):
			rh.RCode = dnsmessage.RCodeNameError
		case question.Type == dnsmessage.TypeA:
			if addr, err = ns.addr(name); err != nil {
				rh.RCode = dnsmessage.RCodeServerFailure
				log.Warn("dns", "name", name, keyReason, err.Error())
			}
		}
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(question) != nil {
		return nil
	}
	if addr.IsValid() {
		if b.StartAnswers() != nil {
			return nil
		}
		rr := dnsmessage.ResourceHeader{Name: question.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: dnsTTL}
		if b.AResource(rr, dnsmessage.AResource{A: addr.As4()}) != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	log.Debug("dns", "name", name, "type", question.Type.String(), "address", addr.String())
	return out
}
