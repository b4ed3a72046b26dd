package switchboard

import (
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"toybox/labels"
)

// realHello captures the ClientHello crypto/tls sends for serverName.
func realHello(t testing.TB, serverName string) []byte {
	t.Helper()
	return helloOf(t, &tls.Config{ServerName: serverName, InsecureSkipVerify: serverName == ""})
}

// echHello captures the ClientHello crypto/tls sends for serverName with
// encrypted ClientHello on, through a front called publicName: the outer
// hello names publicName, the encrypted inner one serverName.
func echHello(t testing.TB, serverName, publicName string) []byte {
	t.Helper()
	key, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// One ECHConfig (draft-ietf-tls-esni section 4): version 0xfe0d,
	// config id 1, DHKEM(X25519, HKDF-SHA256), one suite HKDF-SHA256 with
	// AES-128-GCM, no maximum name length, publicName, no extensions.
	var c []byte
	c = append(c, 1)
	c = binary.BigEndian.AppendUint16(c, 0x0020)
	c = binary.BigEndian.AppendUint16(c, uint16(len(key.PublicKey().Bytes())))
	c = append(c, key.PublicKey().Bytes()...)
	c = binary.BigEndian.AppendUint16(c, 4)
	c = binary.BigEndian.AppendUint16(c, 0x0001)
	c = binary.BigEndian.AppendUint16(c, 0x0001)
	c = append(c, 0, byte(len(publicName)))
	c = append(c, publicName...)
	c = binary.BigEndian.AppendUint16(c, 0)
	cfg := binary.BigEndian.AppendUint16(nil, extECH)
	cfg = binary.BigEndian.AppendUint16(cfg, uint16(len(c)))
	cfg = append(cfg, c...)
	list := binary.BigEndian.AppendUint16(nil, uint16(len(cfg)))
	list = append(list, cfg...)
	return helloOf(t, &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS13, EncryptedClientHelloConfigList: list})
}

// withExtension returns a one-record ClientHello whose extensions end with
// one more, of type typ carrying body (lengths adjusted).
func withExtension(t testing.TB, hello []byte, typ uint16, body []byte) []byte {
	t.Helper()
	ext := binary.BigEndian.AppendUint16(nil, typ)
	ext = binary.BigEndian.AppendUint16(ext, uint16(len(body)))
	ext = append(ext, body...)
	out := append(append([]byte(nil), hello...), ext...)
	binary.BigEndian.PutUint16(out[3:], uint16(len(out)-5))
	n := len(out) - 9
	out[6], out[7], out[8] = byte(n>>16), byte(n>>8), byte(n)
	p := 9 + 2 + 32                                // record and handshake headers, version, random
	p += 1 + int(out[p])                           // session id
	p += 2 + int(binary.BigEndian.Uint16(out[p:])) // cipher suites
	p += 1 + int(out[p])                           // compression methods
	binary.BigEndian.PutUint16(out[p:], binary.BigEndian.Uint16(out[p:])+uint16(len(ext)))
	if p+2+int(binary.BigEndian.Uint16(out[p:])) != len(out) {
		t.Fatal("withExtension: the hello's extensions do not end it")
	}
	return out
}

// helloOf captures the first TLS record a client with cfg sends.
func helloOf(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		c := tls.Client(a, cfg)
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		_ = c.Handshake()
	}()
	_ = b.SetReadDeadline(time.Now().Add(2 * time.Second))
	hdr := make([]byte, 5)
	if _, err := readFull(b, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := readFull(b, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func TestParseClientHello(t *testing.T) {
	good := realHello(t, "example.com")
	noSNI := realHello(t, "")
	split := func(h []byte, at int) []byte {
		// The same handshake message carried in two records.
		body := h[5:]
		r1 := append([]byte{22, 3, 1, byte(at >> 8), byte(at)}, body[:at]...)
		rest := body[at:]
		return append(r1, append([]byte{22, 3, 1, byte(len(rest) >> 8), byte(len(rest))}, rest...)...)
	}
	mut := func(f func([]byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	tests := []struct {
		name    string
		in      []byte
		want    string
		wantEnc uint16
		wantErr string
	}{
		{"real", good, "example.com", 0, ""},
		{"no sni", noSNI, "", 0, ""},
		{"ech", echHello(t, "secret.test", "example.com"), "example.com", extECH, ""},
		{"ech grease", withExtension(t, good, extECH, []byte{0, 0, 1, 0, 1, 7, 0, 0, 0, 1, 0}), "example.com", extECH, ""},
		{"esni", withExtension(t, good, extESNI, []byte{0, 1}), "example.com", extESNI, ""},
		{"other extension", withExtension(t, good, 0xfe07, nil), "example.com", 0, ""},
		{"split across records", split(good, 40), "example.com", 0, ""},
		{"empty", nil, "", 0, "no handshake"},
		{"http", []byte("GET / HTTP/1.1\r\n\r\n"), "", 0, "record type 71"},
		{"truncated", good[:len(good)-3], "", 0, "truncated"},
		{"trailing bytes", append(append([]byte(nil), good...), 23, 3, 3, 0, 1, 0), "", 0, "follow the ClientHello"},
		{"wrong handshake type", mut(func(b []byte) []byte { b[5] = 2; return b }), "", 0, "handshake type 2"},
		{"bad record version", mut(func(b []byte) []byte { b[1] = 2; return b }), "", 0, "record version"},
		{"handshake length lies", mut(func(b []byte) []byte { b[8]++; return b }), "", 0, "handshake length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, enc, err := parseClientHello(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, errHello) {
					t.Fatalf("parseClientHello = %q, %#x, %v; want error containing %q", got, enc, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want || enc != tt.wantEnc {
				t.Fatalf("parseClientHello = %q, %#x, %v; want %q, %#x", got, enc, err, tt.want, tt.wantEnc)
			}
		})
	}
}

func TestCheckHello(t *testing.T) {
	tests := []struct {
		name, sni, host string
		ok              bool
	}{
		{"match", "example.com", "example.com", true},
		{"case", "Example.COM", "example.com", true},
		{"mismatch", "evil.com", "example.com", false},
		{"missing sni for a name", "", "example.com", false},
		{"ip target without sni", "", "127.0.0.1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkHello(realHello(t, tt.sni), tt.host)
			if (err == nil) != tt.ok {
				t.Fatalf("checkHello(sni %q, host %q) = %v; want ok %v", tt.sni, tt.host, err, tt.ok)
			}
			if err != nil && !strings.HasPrefix(err.Error(), labels.RefusedPrefix) {
				t.Errorf("error %q does not start with %q", err, labels.RefusedPrefix)
			}
		})
	}
}

// TestCheckHelloRefusesECH: a ClientHello carrying an encrypted ClientHello
// names the granted host outside and may name any other inside, which a
// front shared by both would serve; it is refused, and so are ECH GREASE
// (indistinguishable from it) and the old encrypted SNI.
func TestCheckHelloRefusesECH(t *testing.T) {
	plain := realHello(t, "public.test")
	if err := checkHello(plain, "public.test"); err != nil {
		t.Fatalf("checkHello(plain hello) = %v", err)
	}
	for _, tt := range []struct {
		name  string
		hello []byte
		why   string
	}{
		{"ech", echHello(t, "secret.test", "public.test"), "carries encrypted_client_hello"},
		{"ech grease", withExtension(t, plain, extECH, []byte{0, 0, 1, 0, 1, 7, 0, 0, 0, 1, 0}), "carries encrypted_client_hello"},
		{"esni", withExtension(t, plain, extESNI, []byte{0, 1}), "carries encrypted_server_name (ESNI"},
		{"ech draft 8", withExtension(t, plain, 0xfe08, []byte{0, 1}), "carries encrypted_client_hello of an ECH draft (extension 0xfe08)"},
		{"ech draft 12", withExtension(t, plain, 0xfe0c, []byte{0, 1}), "carries encrypted_client_hello of an ECH draft (extension 0xfe0c)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if sni, _, err := parseClientHello(tt.hello); err != nil || sni != "public.test" {
				t.Fatalf("the hello's outer SNI = %q, %v; want public.test", sni, err)
			}
			err := checkHello(tt.hello, "public.test")
			if err == nil {
				t.Fatal("checkHello admitted it")
			}
			mustContain(t, "refusal", err.Error(), labels.RefusedPrefix+"the ClientHello "+tt.why)
			mustContain(t, "refusal", err.Error(), "an encrypted ClientHello (ECH) hides the name the grant is for")
		})
	}
}

func FuzzParseClientHello(f *testing.F) {
	f.Add(realHello(f, "example.com"))
	f.Add(realHello(f, ""))
	f.Add([]byte{22, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		sni, _, err := parseClientHello(b)
		if err == nil && strings.ContainsAny(sni, " \x00\r\n") {
			t.Fatalf("accepted SNI %q", sni)
		}
	})
}
