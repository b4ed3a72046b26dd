//go:build linux

package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"toybox/labels"
	"toybox/tests/testenv"
	"toybox/vat/wall"
)

func want(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q; output:\n%s", w, out)
		}
	}
}

func TestShapeNone(t *testing.T) {
	w := newWalled(t, "none", wall.Net{None: true})
	out := w.run(t, nil, "env", "")
	want(t, out, `HTTP_PROXY=""`, "DIAL-ERR")
}

func TestShapeListedHost(t *testing.T) {
	echo := echoServer(t)
	other := echoServer(t)
	w := newWalled(t, "listed", wall.Net{})
	grants := []labels.Set{{Host: "127.0.0.1", Port: uint16(echo)}}
	tests := []struct {
		name  string
		arg   string
		wants []string
	}{
		{"the listed host:port", fmt.Sprintf("127.0.0.1:%d|hello through the wall", echo), []string{"STATUS 200", "ECHO hello through the wall"}},
		{"another port of the same host", fmt.Sprintf("127.0.0.1:%d|nope", other), []string{
			"STATUS 403", "PROXY-STATUS toybox-entry; error=destination_ip_prohibited; details=\"egress refused:", "BODY egress refused:",
		}},
		{"another host", fmt.Sprintf("127.0.0.2:%d|nope", echo), []string{"STATUS 403", "BODY egress refused:"}},
		{"a name that is not the listed address", fmt.Sprintf("localhost:%d|nope", echo), []string{"STATUS 403", "BODY egress refused:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want(t, w.run(t, grants, "connect", tt.arg), tt.wants...)
		})
	}
}

func TestShapeNoGrantRefusesWithReason(t *testing.T) {
	echo := echoServer(t)
	w := newWalled(t, "nogrant", wall.Net{})
	out := w.run(t, nil, "connect", fmt.Sprintf("127.0.0.1:%d|x", echo))
	want(t, out, "STATUS 403", "BODY egress refused: this vat has no egress grant", "error=destination_ip_prohibited")
}

func TestShapeInternet(t *testing.T) {
	echo := echoServer(t)
	w := newWalled(t, "internet", wall.Net{})
	internet := []labels.Set{{Scheme: "https", Port: 443, Network: labels.NetworkPublic}}
	tests := []struct {
		name string
		arg  string
	}{
		{"a loopback port", fmt.Sprintf("127.0.0.1:%d|x", echo)},
		{"loopback on 443", "127.0.0.1:443|x"},
		{"a private address on 443", "10.1.2.3:443|x"},
		{"the metadata address", "169.254.169.254:443|x"},
		{"a public address on port 80", "1.1.1.1:80|x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := w.run(t, internet, "connect", tt.arg)
			want(t, out, "STATUS 403", "BODY egress refused:", "PROXY-STATUS toybox-entry; error=destination_ip_prohibited")
		})
	}
}

func TestForwardedPort(t *testing.T) {
	echo := echoServer(t)
	w := newWalled(t, "forward", wall.Net{Forwards: []wall.Forward{{Port: 5432, Host: "127.0.0.1", TargetPort: uint16(echo)}}})
	out := w.run(t, []labels.Set{{Host: "127.0.0.1", Port: uint16(echo)}}, "forward", "127.0.0.1:5432|through a forwarded port")
	want(t, out, "ECHO through a forwarded port")
}

// TestForwardedSchemes: a loopback host the owner listed with a scheme
// (http://127.0.0.1:port, https://localhost) is granted in that scheme
// alone, yet a client inside the wall reaches it straight at its forwarded
// port (NO_PROXY names loopback): plain HTTP goes out one request at a
// time, TLS with its ClientHello checked, as through the proxy.
func TestForwardedSchemes(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(rw, "forwarded answer for %s", r.URL.Path)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	t.Run("http", func(t *testing.T) {
		w := newWalled(t, "fwdhttp", wall.Net{Forwards: []wall.Forward{{Port: 8080, Host: "127.0.0.1", TargetPort: port}}})
		out := w.run(t, []labels.Set{{Scheme: "http", Host: "127.0.0.1", Port: port}}, "forwardget", "127.0.0.1:8080|/through-a-forward")
		want(t, out, "STATUS 200", "BODY forwarded answer for /through-a-forward")
	})
	t.Run("https", func(t *testing.T) {
		tlsServer(t)
		w := newWalled(t, "fwdtls", wall.Net{Forwards: []wall.Forward{{Port: 8443, Host: "localhost", TargetPort: 443}}})
		grant := []labels.Set{{Scheme: "https", Host: "localhost", Port: 443}}
		want(t, w.run(t, grant, "forwardtls", "127.0.0.1:8443|localhost"), "TLS-BODY secret over tls")
		out := w.run(t, grant, "forwardtls", "127.0.0.1:8443|evil.example")
		want(t, out, "TLS-ERROR")
		if strings.Contains(out, "TLS-BODY") {
			t.Errorf("a ClientHello naming another server got through a forward; output:\n%s", out)
		}
		// Plain HTTP to a host granted as https only is refused, with why.
		out = w.run(t, grant, "forwardget", "127.0.0.1:8443|/")
		want(t, out, "STATUS 403", "BODY egress refused:")
	})
}

func TestPlainHTTP(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	complete := map[string]string{} // path: a body the server read to its end
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("X-Seen-Path", r.URL.Path)
		if r.URL.Path == "/big" {
			_, _ = rw.Write(make([]byte, 4<<20))
			return
		}
		if r.URL.Path == "/framing" {
			fmt.Fprintf(rw, "te=%q cl=%d secret=%q keep=%q", r.TransferEncoding, r.ContentLength, r.Header.Get("X-Secret"), r.Header.Get("X-Keep"))
			return
		}
		if r.Method == http.MethodPost {
			b, err := io.ReadAll(r.Body)
			if err == nil {
				mu.Lock()
				complete[r.URL.Path] = string(b)
				mu.Unlock()
			}
			fmt.Fprintf(rw, "plain answer for %s: %d bytes %s, host %s", r.URL.Path, len(b), b, r.Host)
			return
		}
		fmt.Fprintf(rw, "plain answer for %s", r.URL.Path)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := l.Addr().(*net.TCPAddr).Port
	w := newWalled(t, "plain", wall.Net{})
	grants := []labels.Set{{Scheme: "http", Host: "127.0.0.1", Port: uint16(port)}}
	t.Run("listed http address", func(t *testing.T) {
		out := w.run(t, grants, "get", "http://127.0.0.1:"+strconv.Itoa(port)+"/hello")
		want(t, out, "STATUS 200", "BODY plain answer for /hello", "CLOSE true")
	})
	t.Run("unlisted http address", func(t *testing.T) {
		out := w.run(t, grants, "get", "http://127.0.0.1:"+strconv.Itoa(port+1)+"/x")
		want(t, out, "STATUS 403", "BODY egress refused:", "PROXY-STATUS toybox-entry; error=destination_ip_prohibited")
	})
	t.Run("a body by length, Host from the URL", func(t *testing.T) {
		u := "http://127.0.0.1:" + strconv.Itoa(port) + "/post"
		out := w.run(t, grants, "raw", "POST "+u+` HTTP/1.1\r\nHost: intranet.example\r\nContent-Length: 11\r\n\r\nhello world`)
		want(t, out, "STATUS 200", "BODY plain answer for /post: 11 bytes hello world, host 127.0.0.1:"+strconv.Itoa(port))
	})
	t.Run("a chunked body", func(t *testing.T) {
		u := "http://127.0.0.1:" + strconv.Itoa(port) + "/chunked"
		out := w.run(t, grants, "raw", "POST "+u+` HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n`)
		want(t, out, "STATUS 200", "BODY plain answer for /chunked: 11 bytes hello world")
	})
	// A request with no body reaches the server with Content-Length 0,
	// not as an empty chunked body (which some servers refuse).
	t.Run("an empty body by length", func(t *testing.T) {
		u := "http://127.0.0.1:" + strconv.Itoa(port) + "/framing"
		out := w.run(t, grants, "raw", "POST "+u+` HTTP/1.1\r\nContent-Length: 0\r\n\r\n`)
		want(t, out, "STATUS 200", `BODY te=[] cl=0`)
	})
	t.Run("a POST without framing", func(t *testing.T) {
		u := "http://127.0.0.1:" + strconv.Itoa(port) + "/framing"
		out := w.run(t, grants, "raw", "POST "+u+` HTTP/1.1\r\nX-Keep: k\r\n\r\n`)
		want(t, out, "STATUS 200", `BODY te=[] cl=0 secret="" keep="k"`)
	})
	// Fields the client's Connection header names are for this hop only
	// (RFC 9110 section 7.6.1): a credential meant for the proxy is not
	// sent on to the remote.
	t.Run("fields the Connection header names", func(t *testing.T) {
		u := "http://127.0.0.1:" + strconv.Itoa(port) + "/framing"
		out := w.run(t, grants, "raw", "GET "+u+` HTTP/1.1\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\nX-Keep: k\r\n\r\n`)
		want(t, out, "STATUS 200", `BODY te=[] cl=0 secret="" keep="k"`)
	})
	t.Run("ambiguous framing", func(t *testing.T) {
		u := "http://127.0.0.1:" + strconv.Itoa(port) + "/smuggle"
		out := w.run(t, grants, "raw", "POST "+u+` HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`)
		want(t, out, "STATUS 400", "BODY bad proxy request: both Transfer-Encoding and Content-Length")
	})
	// A body the client framed badly, or cut short, must not reach the
	// server as a shorter complete one.
	reached := func(t *testing.T, path string) {
		t.Helper()
		time.Sleep(200 * time.Millisecond) // an aborted upload reaches the server late, if at all
		mu.Lock()
		defer mu.Unlock()
		if b, ok := complete[path]; ok {
			t.Errorf("the server read a complete body %q for %s", b, path)
		}
	}
	t.Run("a malformed chunk", func(t *testing.T) {
		u := "http://127.0.0.1:" + strconv.Itoa(port) + "/badchunk"
		out := w.run(t, grants, "raw", "POST "+u+` HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n world\r\n0\r\n\r\n`)
		want(t, out, "STATUS 400", `BODY bad proxy request: the request body: malformed chunk size "zz"`)
		reached(t, "/badchunk")
	})
	t.Run("a chunked body cut short", func(t *testing.T) {
		u := "http://127.0.0.1:" + strconv.Itoa(port) + "/shortchunk"
		out := w.run(t, grants, "rawclose", "POST "+u+` HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n`)
		want(t, out, "STATUS 400", "BODY bad proxy request: the request body: unexpected EOF")
		reached(t, "/shortchunk")
	})
	t.Run("a body shorter than its length", func(t *testing.T) {
		u := "http://127.0.0.1:" + strconv.Itoa(port) + "/short"
		out := w.run(t, grants, "rawclose", "POST "+u+` HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello`)
		want(t, out, "STATUS 400", "BODY bad proxy request: the request body: unexpected EOF")
		reached(t, "/short")
	})
	t.Run("the whole answer, with the client still sending", func(t *testing.T) {
		// A close with unread input resets the connection and loses the
		// answer's tail.
		u := "http://127.0.0.1:" + strconv.Itoa(port) + "/big"
		out := w.run(t, grants, "rawfull", "GET "+u+` HTTP/1.1\r\nHost: x\r\n\r\n+64k`)
		want(t, out, fmt.Sprintf("LEN %d <nil>", 4<<20))
	})
	t.Run("https target in absolute form", func(t *testing.T) {
		out := w.run(t, grants, "get", "https://127.0.0.1:"+strconv.Itoa(port)+"/x")
		want(t, out, "STATUS 400")
	})
}

// tlsServer serves HTTPS on 127.0.0.1:443 (a self-signed certificate).
func tlsServer(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:443")
	if err != nil {
		testenv.Unavailable(t, "cannot listen on 127.0.0.1:443: "+err.Error())
	}
	srv := &http.Server{
		Handler:   http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { fmt.Fprint(rw, "secret over tls") }),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
	}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
}

func TestConnectTLS(t *testing.T) {
	tlsServer(t)
	w := newWalled(t, "tls", wall.Net{})
	byIP := []labels.Set{{Scheme: "https", Host: "127.0.0.1", Port: 443}}
	byName := []labels.Set{{Scheme: "https", Host: "localhost", Port: 443}}
	t.Run("address target, no SNI", func(t *testing.T) {
		want(t, w.run(t, byIP, "tls", "127.0.0.1:443|"), "STATUS 200", "TLS-BODY secret over tls")
	})
	t.Run("name target, matching SNI", func(t *testing.T) {
		want(t, w.run(t, byName, "tls", "localhost:443|localhost"), "STATUS 200", "TLS-BODY secret over tls")
	})
	t.Run("name target, another SNI", func(t *testing.T) {
		out := w.run(t, byName, "tls", "localhost:443|evil.example")
		want(t, out, "STATUS 200", "TLS-ERROR")
		if strings.Contains(out, "TLS-BODY") {
			t.Errorf("a ClientHello naming another server got through; output:\n%s", out)
		}
	})
	t.Run("ungranted TLS target", func(t *testing.T) {
		want(t, w.run(t, byIP, "tls", "localhost:443|localhost"), "STATUS 403", "BODY egress refused:")
	})
}

// TestAppCannotCrashTheEntry: the app shares the entry's uid and may
// signal pid 1. The signals the Go runtime answers with a crash and a stack
// dump (SIGABRT, SIGTRAP, SIGSYS, SIGILL, SIGSTKFLT, SIGSEGV, SIGBUS,
// SIGFPE, sent with kill) are ignored: the
// proxy serves on.
func TestAppCannotCrashTheEntry(t *testing.T) {
	echo := echoServer(t)
	w := newWalled(t, "signals", wall.Net{})
	out := w.run(t, []labels.Set{{Host: "127.0.0.1", Port: uint16(echo)}}, "signal1", "")
	want(t, out, "BEFORE HTTP/1.1 403", "AFTER HTTP/1.1 403")
	if strings.Contains(out, "goroutine ") || strings.Contains(out, "SIGABRT: abort") {
		t.Errorf("the entry crashed:\n%s", out)
	}
}

// TestPlainHTTPAnswerHeaders: an answer's header whose name is not a valid
// field name (a space before the colon, which Go's client takes as part of
// the name) does not reach the app, where a lenient client would read
// "Transfer-Encoding :" as framing; nor does a remote's Proxy-Status,
// which would pass for the proxy's own.
func TestPlainHTTPAnswerHeaders(t *testing.T) {
	port := serve(t, func(c net.Conn) {
		_, _ = http.ReadRequest(bufio.NewReader(c))
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding : chunked\r\nX A: 1\r\nProxy-Status: fake; error=destination_ip_prohibited\r\nConnection: x-hop\r\nX-Hop: 1\r\nX-Fine: yes\r\nContent-Length: 2\r\n\r\nok")
	})
	w := newWalled(t, "answerhdr", wall.Net{})
	grants := []labels.Set{{Scheme: "http", Host: "127.0.0.1", Port: uint16(port)}}
	out := w.run(t, grants, "rawfull", "GET http://127.0.0.1:"+strconv.Itoa(port)+`/ HTTP/1.1\r\nHost: x\r\n\r\n`)
	want(t, out, "X-Fine: yes", "LEN 2 <nil>")
	for _, bad := range []string{"Transfer-Encoding :", "X A:", "Proxy-Status", "X-Hop"} {
		if strings.Contains(out, bad) {
			t.Errorf("the answer to the app carried %q:\n%s", bad, out)
		}
	}
}
