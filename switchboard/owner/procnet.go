package owner

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// tcpListen is the kernel's TCP_LISTEN state as printed in /proc/net/tcp.
const tcpListen = 0x0A

// Listener is one listening TCP socket of /proc/net/tcp or /proc/net/tcp6.
type Listener struct {
	Addr  netip.Addr // as bound: 4-byte for tcp, 16-byte (maybe v4-mapped) for tcp6
	Port  uint16
	UID   int    // the socket's owner (the creator's fsuid)
	Inode uint64 // the socket inode; /proc/<pid>/fd/<n> links to socket:[Inode]
}

// AddrPort returns the listener's bound address and port.
func (l Listener) AddrPort() netip.AddrPort { return netip.AddrPortFrom(l.Addr, l.Port) }

// ParseProcNet reads a /proc/net/tcp (v6 false) or /proc/net/tcp6 (v6 true)
// table and returns its sockets in the LISTEN state. Addresses are printed by
// the kernel as 32-bit words in host byte order, which order names
// (binary.NativeEndian for the running kernel). A row whose state is
// another one is skipped once its state is read: the table holds every
// connection of the host, and only listeners matter. Anything malformed in
// the header or a LISTEN row is an error wrapping ErrProcNet: a table that
// cannot be read cannot clear a port.
func ParseProcNet(r io.Reader, v6 bool, order binary.ByteOrder) ([]Listener, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var out []Listener
	line := 0
	for sc.Scan() {
		line++
		if line > 1 {
			if st, ok := nthField(sc.Bytes(), 3); ok && len(st) == 2 {
				if v, ok := hexByte(st); ok && v != tcpListen {
					continue
				}
			}
			// A LISTEN row, or one whose state cannot be read: in full.
		}
		text := sc.Text()
		f := strings.Fields(text)
		if line == 1 {
			if len(f) < 2 || f[0] != "sl" || f[1] != "local_address" {
				return nil, fmt.Errorf("%w: line 1: not the table header: %q", ErrProcNet, text)
			}
			continue
		}
		if len(f) == 0 {
			continue
		}
		if len(f) < 10 || !strings.HasSuffix(f[0], ":") {
			return nil, fmt.Errorf("%w: line %d: want at least 10 fields, got %d", ErrProcNet, line, len(f))
		}
		st, err := strconv.ParseUint(f[3], 16, 8)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: state %q: %w", ErrProcNet, line, f[3], err)
		}
		addr, port, err := parseHexAddrPort(f[1], v6, order)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: local address: %w", ErrProcNet, line, err)
		}
		uid, err := strconv.ParseUint(f[7], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: uid %q: %w", ErrProcNet, line, f[7], err)
		}
		inode, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: inode %q: %w", ErrProcNet, line, f[9], err)
		}
		if st != tcpListen {
			continue
		}
		out = append(out, Listener{Addr: addr, Port: port, UID: int(uid), Inode: inode})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: reading: %w", ErrProcNet, err)
	}
	if line == 0 {
		return nil, fmt.Errorf("%w: empty (no header)", ErrProcNet)
	}
	return out, nil
}

// nthField returns the n-th (from 0) space-separated field of b.
func nthField(b []byte, n int) ([]byte, bool) {
	for i := 0; ; i++ {
		for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
			b = b[1:]
		}
		if len(b) == 0 {
			return nil, false
		}
		end := 0
		for end < len(b) && b[end] != ' ' && b[end] != '\t' {
			end++
		}
		if i == n {
			return b[:end], true
		}
		b = b[end:]
	}
}

// hexByte parses two hex digits.
func hexByte(b []byte) (byte, bool) {
	var v byte
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | c
	}
	return v, true
}

// parseHexAddrPort parses "0100007F:1F90" (v4) or 32 hex digits ":" port (v6).
func parseHexAddrPort(s string, v6 bool, order binary.ByteOrder) (netip.Addr, uint16, error) {
	host, portHex, ok := strings.Cut(s, ":")
	if !ok || len(portHex) != 4 {
		return netip.Addr{}, 0, fmt.Errorf("%q: want HEXADDR:HEXPORT", s)
	}
	port, err := strconv.ParseUint(portHex, 16, 16)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("%q: port: %w", s, err)
	}
	words := 1
	if v6 {
		words = 4
	}
	if len(host) != 8*words {
		return netip.Addr{}, 0, fmt.Errorf("%q: want %d hex digits of address, got %d", s, 8*words, len(host))
	}
	var b [16]byte
	for i := 0; i < words; i++ {
		w, err := strconv.ParseUint(host[8*i:8*i+8], 16, 32)
		if err != nil {
			return netip.Addr{}, 0, fmt.Errorf("%q: address: %w", s, err)
		}
		order.PutUint32(b[4*i:], uint32(w))
	}
	if !v6 {
		return netip.AddrFrom4([4]byte(b[:4])), uint16(port), nil
	}
	return netip.AddrFrom16(b), uint16(port), nil
}

// Answering returns the listeners that may answer a TCP connection to target:
// a socket bound to exactly that address (or its v4-mapped form in tcp6), and
// every wildcard (0.0.0.0, ::, ::ffff:0.0.0.0) on that port of a family that
// can carry it. An IPv6 wildcard is counted for an IPv4 target because
// /proc does not say whether it is IPV6_V6ONLY: judging one listener too many
// can only refuse, never admit.
func Answering(ls []Listener, target netip.AddrPort) []Listener {
	want := target.Addr().Unmap()
	var out []Listener
	for _, l := range ls {
		if l.Port != target.Port() {
			continue
		}
		a := l.Addr
		switch {
		case a.Unmap() == want: // exact, or v4-mapped exact in tcp6
		case a.Is4() && a.IsUnspecified() && want.Is4(): // 0.0.0.0 answers every v4 address
		case a.Is4In6() && a.Unmap().IsUnspecified() && want.Is4(): // ::ffff:0.0.0.0
		case a.Is6() && !a.Is4In6() && a.IsUnspecified(): // :: answers v6 and, dual-stack, v4
		default:
			continue
		}
		out = append(out, l)
	}
	return out
}
