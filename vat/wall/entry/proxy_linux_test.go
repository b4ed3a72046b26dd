package entry

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// answerOf runs answer/refuse on one end of a real TCP pair and parses
// what the client reads.
func answerOf(t *testing.T, write func(c net.Conn)) (*http.Response, string) {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			write(c)
		}
	}()
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestRefuseAnswers(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantBody   string
		wantType   string
	}{
		{"switchboard words", errors.New(`rpc: call failed: egress refused: egress to example.org not granted`), 403, "egress refused: egress to example.org not granted", "destination_ip_prohibited"},
		{"no grant", ErrNoGrant, 403, "egress refused: this vat has no egress grant", "destination_ip_prohibited"},
		{"refused decision", errors.Join(ErrRefused, errors.New("10.0.0.1 is private")), 403, "egress refused:", "destination_ip_prohibited"},
		{"transport failure", errors.New("connecting to db: connection refused"), 502, "egress failed: connecting to db", "proxy_internal_error"},
		{"quotes and newlines", errors.New("egress refused: a \"quoted\"\nname"), 403, `egress refused: a "quoted" name`, "destination_ip_prohibited"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := answerOf(t, func(c net.Conn) { refuse(c, tt.err) })
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status = %d; want %d", resp.StatusCode, tt.wantStatus)
			}
			if !strings.HasPrefix(body, tt.wantBody) {
				t.Errorf("body = %q; want prefix %q", body, tt.wantBody)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
				t.Errorf("Content-Type = %q; want text/plain", ct)
			}
			ps := resp.Header.Get("Proxy-Status")
			if !strings.HasPrefix(ps, "toybox-entry; error="+tt.wantType+"; details=\"") {
				t.Errorf("Proxy-Status = %q; want error=%s with details", ps, tt.wantType)
			}
			if !resp.Close {
				t.Error("the answer does not close the connection")
			}
		})
	}
}

func tlsRecord(typ byte, body []byte) []byte {
	return append([]byte{typ, 3, 1, byte(len(body) >> 8), byte(len(body))}, body...)
}

func TestReadTLSRecord(t *testing.T) {
	hello := tlsRecord(0x16, bytes.Repeat([]byte{1}, 300))
	tests := []struct {
		name    string
		in      []byte
		want    []byte
		wantErr string
	}{
		{"a handshake record", append(append([]byte{}, hello...), "early data"...), hello, ""},
		{"plain HTTP on a TLS port", []byte("GET / HTTP/1.1\r\n\r\n"), nil, "does not start with a TLS handshake"},
		{"an empty record", tlsRecord(0x16, nil), nil, "TLS record of 0 bytes"},
		{"too long", []byte{0x16, 3, 1, 0xff, 0xff}, nil, "TLS record of 65535 bytes"},
		{"cut short", hello[:100], nil, "reading the TLS ClientHello"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readTLSRecord(bufio.NewReader(bytes.NewReader(tt.in)))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("readTLSRecord = %v; want error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tt.want) {
				t.Errorf("readTLSRecord = %d bytes, %v; want the %d-byte record", len(got), err, len(tt.want))
			}
		})
	}
}

func FuzzReadTLSRecord(f *testing.F) {
	f.Add(tlsRecord(0x16, []byte("hello")))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{0x16, 3, 1, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := readTLSRecord(bufio.NewReader(bytes.NewReader(in)))
		if err != nil {
			return
		}
		if got[0] != 0x16 || len(got) != 5+(int(got[3])<<8|int(got[4])) || len(got) > 5+maxTLSRecord {
			t.Fatalf("accepted a malformed record % x", got[:5])
		}
	})
}
