// Package dnstest is a tiny authoritative DNS responder for tests.
//
// It is a tiny authoritative DNS responder on a local UDP socket, for tests:
// each name answers what the test sets (A and AAAA from the same list, or a
// CNAME to another name it knows), can change between lookups, and counts
// its queries.
package dnstest

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// AnswerFunc returns the answers for the n-th query (from 1) of a name and
// type ("A" or "AAAA").
type AnswerFunc func(n int, qtype string) []netip.Addr

// Server is a running responder.
type Server struct {
	pc net.PacketConn

	mu      sync.Mutex
	names   map[string]AnswerFunc
	cnames  map[string]string
	queries map[string]int // by "name/type"
	delay   map[string]time.Duration
	done    chan struct{}
}

// New starts a responder on addr (such as "127.0.0.1:0"). The caller must
// Close it.
func New(addr string) (*Server, error) {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{pc: pc, names: map[string]AnswerFunc{}, cnames: map[string]string{}, queries: map[string]int{}, delay: map[string]time.Duration{}, done: make(chan struct{})}
	go s.loop()
	return s, nil
}

// Addr returns the responder's ip:port.
func (s *Server) Addr() string { return s.pc.LocalAddr().String() }

// Close stops the responder.
func (s *Server) Close() error {
	err := s.pc.Close()
	<-s.done
	return err
}

// Set makes name answer addrs (A: the IPv4 ones, AAAA: the others). No
// addresses: the name exists with no records.
func (s *Server) Set(name string, addrs ...netip.Addr) {
	s.SetFunc(name, func(int, string) []netip.Addr { return addrs })
}

// SetFunc makes name answer what f returns.
func (s *Server) SetFunc(name string, f AnswerFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names[canon(name)] = f
}

// SetCNAME makes name an alias of target: its answer is a CNAME record to
// target followed by target's addresses, as a recursive resolver gives it.
func (s *Server) SetCNAME(name, target string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cnames[canon(name)] = canon(target)
}

// SetDelay delays every answer for name.
func (s *Server) SetDelay(name string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay[canon(name)] = d
}

// Queries returns how many queries of qtype ("A", "AAAA", or "" for all)
// name received.
func (s *Server) Queries(name, qtype string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := canon(name)
	if qtype != "" {
		return s.queries[n+"/"+qtype]
	}
	return s.queries[n+"/A"] + s.queries[n+"/AAAA"]
}

func canon(n string) string { return strings.TrimSuffix(strings.ToLower(n), ".") }

func (s *Server) loop() {
	defer close(s.done)
	buf := make([]byte, 1500)
	for {
		n, from, err := s.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		q := append([]byte(nil), buf[:n]...)
		go s.answer(q, from)
	}
}

var errBad = errors.New("bad query")

// parseQuestion returns the query name, type and the end of the question.
func parseQuestion(q []byte) (string, uint16, int, error) {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:]) != 1 {
		return "", 0, 0, errBad
	}
	i := 12
	var labels []string
	for {
		if i >= len(q) {
			return "", 0, 0, errBad
		}
		l := int(q[i])
		i++
		if l == 0 {
			break
		}
		if l > 63 || i+l > len(q) {
			return "", 0, 0, errBad
		}
		labels = append(labels, string(q[i:i+l]))
		i += l
	}
	if i+4 > len(q) {
		return "", 0, 0, errBad
	}
	return strings.Join(labels, "."), binary.BigEndian.Uint16(q[i:]), i + 4, nil
}

func (s *Server) answer(q []byte, from net.Addr) {
	name, qtype, end, err := parseQuestion(q)
	if err != nil {
		return
	}
	typ := map[uint16]string{1: "A", 28: "AAAA"}[qtype]
	s.mu.Lock()
	target, alias := s.cnames[canon(name)]
	f, known := s.names[canon(name)]
	if alias {
		f, known = s.names[target]
	}
	key := canon(name) + "/" + typ
	s.queries[key]++
	count := s.queries[key]
	delay := s.delay[canon(name)]
	s.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	var answers []netip.Addr
	if known && typ != "" {
		for _, a := range f(count, typ) {
			if (typ == "A") == a.Is4() {
				answers = append(answers, a)
			}
		}
	}
	resp := make([]byte, 0, 512)
	resp = append(resp, q[0], q[1])
	flags := uint16(0x8400) | uint16(q[2]&0x01)<<8 // QR, AA, copy RD
	if !known {
		flags |= 3 // NXDOMAIN
	}
	resp = binary.BigEndian.AppendUint16(resp, flags)
	resp = binary.BigEndian.AppendUint16(resp, 1)
	n := len(answers)
	if alias {
		n++
	}
	resp = binary.BigEndian.AppendUint16(resp, uint16(n))
	resp = binary.BigEndian.AppendUint16(resp, 0)
	resp = binary.BigEndian.AppendUint16(resp, 0)
	resp = append(resp, q[12:end]...)
	owner := []byte{0xc0, 12} // pointer to the question name
	if alias {
		at := len(resp) + 12 // where the target's name will start
		resp = append(resp, owner...)
		resp = binary.BigEndian.AppendUint16(resp, 5) // CNAME
		resp = binary.BigEndian.AppendUint16(resp, 1)
		resp = binary.BigEndian.AppendUint32(resp, 0)
		wire := encodeName(target)
		resp = binary.BigEndian.AppendUint16(resp, uint16(len(wire)))
		resp = append(resp, wire...)
		owner = []byte{0xc0 | byte(at>>8), byte(at)}
	}
	for _, a := range answers {
		resp = append(resp, owner...)
		resp = binary.BigEndian.AppendUint16(resp, qtype)
		resp = binary.BigEndian.AppendUint16(resp, 1)
		resp = binary.BigEndian.AppendUint32(resp, 0)
		b := a.AsSlice()
		resp = binary.BigEndian.AppendUint16(resp, uint16(len(b)))
		resp = append(resp, b...)
	}
	_, _ = s.pc.WriteTo(resp, from)
}

// encodeName returns name in DNS wire form (labels, then the root).
func encodeName(name string) []byte {
	var b []byte
	for _, l := range strings.Split(name, ".") {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	return append(b, 0)
}
