package switchboard

import (
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// realHello captures the ClientHello crypto/tls sends for serverName.
func realHello(t testing.TB, serverName string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		c := tls.Client(a, &tls.Config{ServerName: serverName, InsecureSkipVerify: serverName == ""})
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
		wantErr string
	}{
		{"real", good, "example.com", ""},
		{"no sni", noSNI, "", ""},
		{"split across records", split(good, 40), "example.com", ""},
		{"empty", nil, "", "no handshake"},
		{"http", []byte("GET / HTTP/1.1\r\n\r\n"), "", "record type 71"},
		{"truncated", good[:len(good)-3], "", "truncated"},
		{"trailing bytes", append(append([]byte(nil), good...), 23, 3, 3, 0, 1, 0), "", "follow the ClientHello"},
		{"wrong handshake type", mut(func(b []byte) []byte { b[5] = 2; return b }), "", "handshake type 2"},
		{"bad record version", mut(func(b []byte) []byte { b[1] = 2; return b }), "", "record version"},
		{"handshake length lies", mut(func(b []byte) []byte { b[8]++; return b }), "", "handshake length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseClientHello(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, errHello) {
					t.Fatalf("parseClientHello = %q, %v; want error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parseClientHello = %q, %v; want %q", got, err, tt.want)
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
			if err != nil && !strings.HasPrefix(err.Error(), RefusedPrefix) {
				t.Errorf("error %q does not start with %q", err, RefusedPrefix)
			}
		})
	}
}

func FuzzParseClientHello(f *testing.F) {
	f.Add(realHello(f, "example.com"))
	f.Add(realHello(f, ""))
	f.Add([]byte{22, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		sni, err := parseClientHello(b)
		if err == nil && strings.ContainsAny(sni, " \x00\r\n") {
			t.Fatalf("accepted SNI %q", sni)
		}
	})
}
