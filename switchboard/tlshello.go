package switchboard

import (
	"errors"
	"fmt"
)

// TLS wire constants (RFC 8446).
const (
	recordHandshake   = 22
	handshakeHello    = 1
	extServerName     = 0
	extECH            = 0xfe0d // encrypted_client_hello (RFC 9849 / draft-ietf-tls-esni)
	extESNI           = 0xffce // encrypted_server_name, ECH's withdrawn predecessor
	extECHDraftFirst  = 0xfe08 // the code points of ECH's drafts 8 to 12 (0xfe08-0xfe0c)
	nameTypeHostName  = 0
	maxRecordPayload  = 16384 + 256 // TLSPlaintext limit, with slack for TLS 1.2 padding
	maxClientHelloLen = 1 << 16     // more than any real ClientHello
)

var errHello = errors.New("not a TLS ClientHello")

// parseClientHello reads data, which must be exactly the TLS records that
// carry one ClientHello (nothing before or after), and returns its SNI
// host name ("" when it sends none) and, when it carries one, the type of
// its encrypted_client_hello or encrypted_server_name extension (else 0):
// with either, the name the server acts on is not the SNI read here. It is
// strict: wrong record types or versions, lengths that disagree, duplicate
// extensions, a malformed or repeated server_name, or a name with bytes
// outside printable ASCII are errors.
func parseClientHello(data []byte) (sni string, encrypted uint16, err error) {
	var msg []byte
	for len(data) > 0 {
		if len(data) < 5 {
			return "", 0, fmt.Errorf("%w: truncated record header", errHello)
		}
		if data[0] != recordHandshake {
			return "", 0, fmt.Errorf("%w: record type %d, want handshake (22)", errHello, data[0])
		}
		if data[1] != 3 || data[2] > 4 {
			return "", 0, fmt.Errorf("%w: record version %d.%d", errHello, data[1], data[2])
		}
		n := int(data[3])<<8 | int(data[4])
		if n == 0 || n > maxRecordPayload {
			return "", 0, fmt.Errorf("%w: record length %d", errHello, n)
		}
		if len(data) < 5+n {
			return "", 0, fmt.Errorf("%w: record of %d bytes truncated to %d", errHello, n, len(data)-5)
		}
		msg = append(msg, data[5:5+n]...)
		data = data[5+n:]
		if len(msg) >= 4 {
			want := 4 + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]))
			if len(msg) >= want && len(data) > 0 {
				return "", 0, fmt.Errorf("%w: %d bytes follow the ClientHello", errHello, len(data))
			}
		}
	}
	if len(msg) < 4 {
		return "", 0, fmt.Errorf("%w: no handshake message", errHello)
	}
	if msg[0] != handshakeHello {
		return "", 0, fmt.Errorf("%w: handshake type %d, want client_hello (1)", errHello, msg[0])
	}
	n := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
	if n > maxClientHelloLen || len(msg) != 4+n {
		return "", 0, fmt.Errorf("%w: handshake length %d but %d bytes carried", errHello, n, len(msg)-4)
	}
	r := reader(msg[4:])
	var ok bool
	if _, ok = r.take(2); !ok { // legacy_version
		return "", 0, fmt.Errorf("%w: truncated version", errHello)
	}
	if _, ok = r.take(32); !ok {
		return "", 0, fmt.Errorf("%w: truncated random", errHello)
	}
	sid, ok := r.vec(1)
	if !ok || len(sid) > 32 {
		return "", 0, fmt.Errorf("%w: bad session id", errHello)
	}
	suites, ok := r.vec(2)
	if !ok || len(suites) < 2 || len(suites)%2 != 0 {
		return "", 0, fmt.Errorf("%w: bad cipher suites", errHello)
	}
	comp, ok := r.vec(1)
	if !ok || len(comp) < 1 {
		return "", 0, fmt.Errorf("%w: bad compression methods", errHello)
	}
	if len(r) == 0 {
		return "", 0, nil // no extensions, so no SNI
	}
	exts, ok := r.vec(2)
	if !ok || len(r) != 0 {
		return "", 0, fmt.Errorf("%w: bad extensions block", errHello)
	}
	er := reader(exts)
	seen := map[uint16]bool{}
	for len(er) > 0 {
		typ, ok1 := er.u16()
		body, ok2 := er.vec(2)
		if !ok1 || !ok2 {
			return "", 0, fmt.Errorf("%w: truncated extension", errHello)
		}
		if seen[typ] {
			return "", 0, fmt.Errorf("%w: extension %d repeated", errHello, typ)
		}
		seen[typ] = true
		if (typ == extECH || typ == extESNI || (typ >= extECHDraftFirst && typ < extECH)) && encrypted == 0 {
			encrypted = typ
		}
		if typ != extServerName {
			continue
		}
		br := reader(body)
		list, ok := br.vec(2)
		if !ok || len(br) != 0 || len(list) == 0 {
			return "", 0, fmt.Errorf("%w: bad server_name extension", errHello)
		}
		lr := reader(list)
		for len(lr) > 0 {
			nt, ok1 := lr.take(1)
			name, ok2 := lr.vec(2)
			if !ok1 || !ok2 {
				return "", 0, fmt.Errorf("%w: truncated server_name entry", errHello)
			}
			if nt[0] != nameTypeHostName {
				return "", 0, fmt.Errorf("%w: server_name type %d", errHello, nt[0])
			}
			if sni != "" {
				return "", 0, fmt.Errorf("%w: more than one host_name in server_name", errHello)
			}
			if len(name) == 0 {
				return "", 0, fmt.Errorf("%w: empty host_name", errHello)
			}
			for _, c := range name {
				if c <= ' ' || c >= 0x7f {
					return "", 0, fmt.Errorf("%w: host_name has byte 0x%02x", errHello, c)
				}
			}
			sni = string(name)
		}
	}
	return sni, encrypted, nil
}

type reader []byte

func (r *reader) take(n int) ([]byte, bool) {
	if len(*r) < n {
		return nil, false
	}
	b := (*r)[:n]
	*r = (*r)[n:]
	return b, true
}

func (r *reader) u16() (uint16, bool) {
	b, ok := r.take(2)
	if !ok {
		return 0, false
	}
	return uint16(b[0])<<8 | uint16(b[1]), true
}

// vec reads a vector with an n-byte length prefix.
func (r *reader) vec(n int) ([]byte, bool) {
	lb, ok := r.take(n)
	if !ok {
		return nil, false
	}
	l := 0
	for _, b := range lb {
		l = l<<8 | int(b)
	}
	return r.take(l)
}

// helloRetryRandom is the random of a ServerHello that is a TLS 1.3
// HelloRetryRequest (RFC 8446 section 4.1.3).
var helloRetryRandom = [32]byte{
	0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
	0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
}

// serverHelloHead is how much of the server's first flight tells a
// HelloRetryRequest: a record header, a handshake header, legacy_version
// and the random.
const serverHelloHead = 5 + 4 + 2 + 32

// isHelloRetry reports whether head (the first bytes the server sent) is a
// HelloRetryRequest.
func isHelloRetry(head []byte) bool {
	return len(head) >= serverHelloHead && head[0] == recordHandshake && head[5] == 2 &&
		[32]byte(head[11:43]) == helloRetryRandom
}
