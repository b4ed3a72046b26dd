// Command egress-probe is a vat that reaches out on request and says what
// happened.
//
// It goes through the proxy its wall gives it ($HTTPS_PROXY / $HTTP_PROXY,
// toybox-entry's CONNECT proxy on loopback), which admits only what the vat
// was granted:
//
//	GET /?url=https://example.com/   fetch: "got: <first bytes>" or "got: egress refused: ..."
//	GET /?url=http://...&proxy=absolute   send an http:// request to the proxy in
//	                                 absolute form (as curl and most clients do)
//	                                 instead of through a CONNECT tunnel
//	GET /tcp?addr=host:port&send=s   raw TCP: send s, "got: <reply>"
//	GET /ws?url=ws://host:port/p&send=s   WebSocket: send s as a text message, "got: <reply>"
//	GET /hold?addr=host:port&n=N     open N tunnels and keep them:
//	                                 "got: held H, refused R[: <first refusal>]"
//	GET /release                     close every tunnel /hold keeps
//	GET /keep?addr=host:port&name=n  raw TCP kept open under name n: "got: kept"
//	GET /kept?name=n&send=s          send s on the connection kept as n: "got: <reply>"
//	                                 (or why not: it was shut, say)
//
// It knows nothing of Cap'n Proto: any program that honours proxy variables
// gets out the same way, and only through its grant.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

const maxShown = 200

func main() {
	listen := os.Getenv("TOYBOX_LISTEN")
	if listen == "" {
		log.Fatal("egress-probe: TOYBOX_LISTEN must be set (run it as a vat)")
	}
	http.HandleFunc("/", fetch)
	http.HandleFunc("/tcp", rawTCP)
	http.HandleFunc("/ws", webSocket)
	http.HandleFunc("/hold", hold)
	http.HandleFunc("/release", release)
	http.HandleFunc("/keep", keep)
	http.HandleFunc("/kept", useKept)
	_ = os.Remove(listen)
	l, err := net.Listen("unix", listen)
	if err != nil {
		log.Fatalf("egress-probe: %v", err)
	}
	log.Fatal(http.Serve(l, nil))
}

// proxyAddr is the proxy's host:port, or "" when the vat has no way out
// through a proxy (no grant, or running unwalled).
func proxyAddr() string {
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"} {
		if v := os.Getenv(k); v != "" {
			if u, err := url.Parse(v); err == nil && u.Host != "" {
				return u.Host
			}
		}
	}
	return ""
}

// tunnel opens a TCP stream to addr: a CONNECT through the proxy, or a plain
// dial when there is no proxy. A refusal comes back as the proxy's words.
func tunnel(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	proxy := proxyAddr()
	if proxy == "" {
		return d.DialContext(ctx, "tcp", addr)
	}
	c, err := d.DialContext(ctx, "tcp", proxy)
	if err != nil {
		return nil, fmt.Errorf("reaching the proxy: %w", err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("reading the proxy's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		c.Close()
		msg := strings.TrimSpace(string(b))
		if msg == "" {
			msg = resp.Status
		}
		return nil, errors.New(msg)
	}
	_ = c.SetDeadline(time.Time{})
	if br.Buffered() > 0 {
		return nil, errors.New("the proxy sent bytes before the tunnel opened")
	}
	return c, nil
}

func client(absolute bool) *http.Client {
	proxy := proxyAddr()
	tr := &http.Transport{
		// Every connection is a CONNECT tunnel (the switchboard sees a TCP
		// stream, or a TLS one for https), unless absolute: then http://
		// goes to the proxy as an absolute-form request.
		Proxy: func(r *http.Request) (*url.URL, error) {
			if absolute && proxy != "" && r.URL.Scheme == "http" {
				return &url.URL{Scheme: "http", Host: proxy}, nil
			}
			return nil, nil
		},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if proxy != "" && addr == proxy {
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			}
			return tunnel(ctx, addr)
		},
		ForceAttemptHTTP2: false,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func say(w http.ResponseWriter, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if len(s) > maxShown {
		s = s[:maxShown] + "…"
	}
	fmt.Fprintf(w, "got: %s\n", s)
}

func sayErr(w http.ResponseWriter, err error) {
	msg := err.Error()
	if i := strings.Index(msg, "egress refused:"); i >= 0 {
		msg = msg[i:]
	}
	say(w, msg)
}

func fetch(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	target := r.URL.Query().Get("url")
	if target == "" {
		fmt.Fprintln(w, "egress-probe: ask /?url=https://example.com/")
		return
	}
	resp, err := client(r.URL.Query().Get("proxy") == "absolute").Get(target)
	if err != nil {
		sayErr(w, err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxShown))
	say(w, string(b))
}

func rawTCP(w http.ResponseWriter, r *http.Request) {
	addr, send := r.URL.Query().Get("addr"), r.URL.Query().Get("send")
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	c, err := tunnel(ctx, addr)
	if err != nil {
		sayErr(w, err)
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, send+"\n"); err != nil {
		sayErr(w, err)
		return
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && line == "" {
		sayErr(w, err)
		return
	}
	say(w, strings.TrimRight(line, "\n"))
}

// webSocket speaks just enough RFC 6455 to send one text message and read
// one back.
func webSocket(w http.ResponseWriter, r *http.Request) {
	u, err := url.Parse(r.URL.Query().Get("url"))
	if err != nil || u.Scheme != "ws" || u.Host == "" {
		say(w, "want ?url=ws://host:port/path")
		return
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	c, err := tunnel(ctx, addr)
	if err != nil {
		sayErr(w, err)
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	keyb := make([]byte, 16)
	_, _ = rand.Read(keyb)
	key := base64.StdEncoding.EncodeToString(keyb)
	path := u.RequestURI()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", path, u.Host, key)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		sayErr(w, err)
		return
	}
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		say(w, "websocket handshake failed: "+resp.Status)
		return
	}
	msg := []byte(r.URL.Query().Get("send"))
	if len(msg) > 125 {
		say(w, "send at most 125 bytes")
		return
	}
	frame := []byte{0x81, 0x80 | byte(len(msg)), 0, 0, 0, 0}
	_, _ = rand.Read(frame[2:6])
	for i, b := range msg {
		frame = append(frame, b^frame[2+i%4])
	}
	if _, err := c.Write(frame); err != nil {
		sayErr(w, err)
		return
	}
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		sayErr(w, err)
		return
	}
	n := uint64(hdr[1] & 0x7f)
	switch n {
	case 126:
		var ext [2]byte
		if _, err := io.ReadFull(br, ext[:]); err != nil {
			sayErr(w, err)
			return
		}
		n = uint64(binary.BigEndian.Uint16(ext[:]))
	case 127:
		say(w, "reply too large")
		return
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(br, payload); err != nil {
		sayErr(w, err)
		return
	}
	say(w, string(payload))
}

// held are the tunnels /hold keeps.
var held struct {
	sync.Mutex
	conns []net.Conn
}

// hold opens n tunnels to addr and keeps them, as an app that holds many
// connections open does.
func hold(w http.ResponseWriter, r *http.Request) {
	addr := r.URL.Query().Get("addr")
	n, err := strconv.Atoi(r.URL.Query().Get("n"))
	if err != nil || n < 1 || addr == "" {
		say(w, "want ?addr=host:port&n=<count>")
		return
	}
	kept, refused := 0, 0
	var first error
	for range n {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		c, err := tunnel(ctx, addr)
		cancel()
		if err != nil {
			refused++
			if first == nil {
				first = err
			}
			continue
		}
		kept++
		held.Lock()
		held.conns = append(held.conns, c)
		held.Unlock()
	}
	msg := fmt.Sprintf("held %d, refused %d", kept, refused)
	if first != nil {
		msg += ": " + first.Error()
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "got: %s\n", msg) // the whole refusal, never cut
}

// release closes every tunnel hold keeps.
func release(w http.ResponseWriter, _ *http.Request) {
	held.Lock()
	cs := held.conns
	held.conns = nil
	held.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
	say(w, fmt.Sprintf("released %d", len(cs)))
}

// named are the connections /keep keeps open, by name.
var named = struct {
	sync.Mutex
	m map[string]*namedConn
}{m: map[string]*namedConn{}}

type namedConn struct {
	c  net.Conn
	br *bufio.Reader
}

func keep(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	c, err := tunnel(ctx, q.Get("addr"))
	if err != nil {
		sayErr(w, err)
		return
	}
	named.Lock()
	if old := named.m[q.Get("name")]; old != nil {
		_ = old.c.Close()
	}
	named.m[q.Get("name")] = &namedConn{c: c, br: bufio.NewReader(c)}
	named.Unlock()
	say(w, "kept")
}

func useKept(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	named.Lock()
	h := named.m[q.Get("name")]
	named.Unlock()
	if h == nil {
		say(w, "no connection kept as "+q.Get("name"))
		return
	}
	_ = h.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(h.c, q.Get("send")+"\n"); err != nil {
		sayErr(w, err)
		return
	}
	line, err := h.br.ReadString('\n')
	if err != nil && line == "" {
		sayErr(w, err)
		return
	}
	say(w, strings.TrimRight(line, "\n"))
}
