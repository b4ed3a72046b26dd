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

	"toybox/labels"
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

// TestRefuseAnswers: a refusal is a 403 whose body starts "egress
// refused:", with Proxy-Status; any other failure a 502. A plain-HTTP
// request the switchboard refuses only when it dials (the listener-owner
// check of a loopback address) arrives as a failed request (requestFailed)
// and is answered as the same refusal to a CONNECT is.
func TestRefuseAnswers(t *testing.T) {
	refused := func(err error) func(net.Conn) { return func(c net.Conn) { refuse(c, err) } }
	failed := func(msg string) func(net.Conn) { return func(c net.Conn) { requestFailed(c, msg) } }
	tests := []struct {
		name       string
		send       func(net.Conn)
		wantStatus int
		wantBody   string
		wantType   string
	}{
		{"switchboard words", refused(errors.New(`rpc: call failed: egress refused: egress to example.org not granted`)), 403, "egress refused: egress to example.org not granted", "destination_ip_prohibited"},
		{"no grant", refused(ErrNoGrant), 403, "egress refused: this vat has no egress grant", "destination_ip_prohibited"},
		{"refused decision", refused(errors.Join(labels.ErrRefused, errors.New("10.0.0.1 is private"))), 403, "egress refused:", "destination_ip_prohibited"},
		{"transport failure", refused(errors.New("connecting to db: connection refused")), 502, "egress failed: connecting to db", "proxy_internal_error"},
		{"quotes and newlines", refused(errors.New("egress refused: a \"quoted\"\nname")), 403, `egress refused: a "quoted" name`, "destination_ip_prohibited"},
		{"request refused at the dial", failed(`request to 127.0.0.1:8000 failed: egress refused: 127.0.0.1:8000 is held by toybox's own process`), 403, "egress refused: 127.0.0.1:8000 is held by toybox's own process", "destination_ip_prohibited"},
		{"request failed", failed("request to 127.0.0.1:8000 failed: dial tcp 127.0.0.1:8000: connect: connection refused"), 502, "request to 127.0.0.1:8000 failed: dial tcp", "http_request_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := answerOf(t, tt.send)
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

// helloMsg is a handshake message of type client_hello with n body bytes.
func helloMsg(n int) []byte {
	return append([]byte{1, byte(n >> 16), byte(n >> 8), byte(n)}, bytes.Repeat([]byte{7}, n)...)
}

func TestReadTLSHello(t *testing.T) {
	msg := helloMsg(296)
	one := tlsRecord(0x16, msg)
	split := append(tlsRecord(0x16, msg[:2]), tlsRecord(0x16, msg[2:100])...)
	split = append(split, tlsRecord(0x16, msg[100:])...)
	big := helloMsg(40 << 10) // spans three full records
	var bigRecs []byte
	for rest := big; len(rest) > 0; {
		k := min(len(rest), 16384)
		bigRecs = append(bigRecs, tlsRecord(0x16, rest[:k])...)
		rest = rest[k:]
	}
	var tiny []byte // a record per byte: more record bytes than any hello needs
	for _, b := range helloMsg(20 << 10) {
		tiny = append(tiny, tlsRecord(0x16, []byte{b})...)
	}
	tests := []struct {
		name    string
		in      []byte
		want    []byte
		wantErr string
	}{
		{"one handshake record", append(append([]byte{}, one...), tlsRecord(0x17, []byte("early data"))...), one, ""},
		{"a hello split over three records", append(append([]byte{}, split...), "early data"...), split, ""},
		{"a 40 KiB hello", bigRecs, bigRecs, ""},
		{"plain HTTP on a TLS port", []byte("GET / HTTP/1.1\r\n\r\n"), nil, "does not start with a TLS handshake"},
		{"an empty record", tlsRecord(0x16, nil), nil, "TLS record of 0 bytes"},
		{"too long", []byte{0x16, 3, 1, 0xff, 0xff}, nil, "TLS record of 65535 bytes"},
		{"cut short", one[:100], nil, "reading the TLS ClientHello"},
		{"cut short between records", split[:len(split)-len(msg)+100], nil, "reading the TLS ClientHello"},
		{"another record type inside", append(tlsRecord(0x16, msg[:50]), tlsRecord(0x17, msg[50:])...), nil, "a TLS record of type 23 inside the ClientHello"},
		{"too many record bytes", tiny, nil, "in more than 81920 bytes of records"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readTLSHello(bufio.NewReader(bytes.NewReader(tt.in)))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("readTLSHello = %v; want error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tt.want) {
				t.Errorf("readTLSHello = %d bytes, %v; want the %d bytes of records", len(got), err, len(tt.want))
			}
		})
	}
}

func FuzzReadTLSHello(f *testing.F) {
	f.Add(tlsRecord(0x16, helloMsg(5)))
	f.Add(append(tlsRecord(0x16, helloMsg(5)[:3]), tlsRecord(0x16, helloMsg(5)[3:])...))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{0x16, 3, 1, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := readTLSHello(bufio.NewReader(bytes.NewReader(in)))
		if err != nil {
			return
		}
		// Whole handshake records, the last one completing the message.
		if len(got) > maxTLSHello {
			t.Fatalf("accepted %d bytes of records", len(got))
		}
		var msg []byte
		for rest := got; len(rest) > 0; {
			if len(rest) < 5 || rest[0] != 0x16 {
				t.Fatalf("accepted a malformed record % x", rest[:min(len(rest), 5)])
			}
			n := int(rest[3])<<8 | int(rest[4])
			if n == 0 || n > maxTLSRecord || len(rest) < 5+n {
				t.Fatalf("accepted a record of %d bytes with %d left", n, len(rest)-5)
			}
			msg = append(msg, rest[5:5+n]...)
			rest = rest[5+n:]
			complete := len(msg) >= 4 && len(msg) >= 4+(int(msg[1])<<16|int(msg[2])<<8|int(msg[3]))
			if complete != (len(rest) == 0) {
				t.Fatalf("records go on past the message, or stop before it is whole")
			}
		}
	})
}
