package switchboard

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"toybox/schema"
	"toybox/schema/wire"
)

// wsRemote answers one WebSocket handshake per connection, then runs
// after on the connection.
func wsRemote(t *testing.T, after func(c net.Conn)) uint16 {
	t.Helper()
	port := serveTCP(t, func(c net.Conn) {
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		sum := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + wsGUID))
		fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", base64.StdEncoding.EncodeToString(sum[:]))
		after(c)
	})
	return port
}

// serverFrame is one unmasked frame, as a server sends it.
func serverFrame(op byte, payload []byte) []byte {
	h := []byte{0x80 | op}
	switch n := len(payload); {
	case n < 126:
		h = append(h, byte(n))
	case n <= 0xffff:
		h = append(h, 126, byte(n>>8), byte(n))
	default:
		h = append(h, 127)
		h = binary.BigEndian.AppendUint64(h, uint64(n))
	}
	return append(h, payload...)
}

func openWebSocket(h schema.Handle, url string, mc *msgCollector) (schema.MessageStream, error) {
	fut, release := h.WebSocket(context.Background(), func(p schema.Handle_webSocket_Params) error {
		if err := p.SetUrl(url); err != nil {
			return err
		}
		return p.SetDownstream(schema.MessageStream_ServerToClient(mc))
	})
	defer release()
	r, err := fut.Struct()
	if err != nil {
		return schema.MessageStream{}, err
	}
	return r.Upstream().AddRef(), nil
}

// TestWebSocketLargeMessage: a message over the stream window (2 MiB under
// the 1 MiB default, within the 16 MiB message limit) is delivered whole; it
// used to panic the switchboard in go-capnp's fixed flow limiter.
func TestWebSocketLargeMessage(t *testing.T) {
	big := []byte(strings.Repeat("x", 2<<20))
	port := wsRemote(t, func(c net.Conn) {
		_, _ = c.Write(serverFrame(opBinary, big))
		time.Sleep(2 * time.Second)
	})
	f := newFixture(t, nil)
	c := dial(t, f.local)
	mc := &msgCollector{got: make(chan struct{}, 4), closed: make(chan struct{})}
	up, err := openWebSocket(c.root, fmt.Sprintf("ws://127.0.0.1:%d/", port), mc)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Release()
	select {
	case <-mc.got:
		mc.mu.Lock()
		n := len(mc.msgs[0])
		mc.mu.Unlock()
		if n != len(big) {
			t.Errorf("got a message of %d bytes; want %d", n, len(big))
		}
	case <-mc.closed:
		t.Fatalf("closed with %d instead of the message", mc.code)
	case <-time.After(10 * time.Second):
		t.Fatal("no message")
	}
}

// TestWebSocketHandshakeBounded: an answer to the handshake whose headers
// never end is refused once it passes maxWSHandshake, not read on until
// the dial timeout (one endless header line took gigabytes).
func TestWebSocketHandshakeBounded(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Read(make([]byte, 4096))
		_, _ = c.Write([]byte("HTTP/1.1 101 Switching Protocols\r\nX-A: "))
		chunk := []byte(strings.Repeat("a", 1<<16))
		for range 1 << 10 { // up to 64 MiB
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}()
	f := newFixture(t, func(c *Config) { c.DialTimeout = 20 * time.Second })
	c := dial(t, f.local)
	mc := &msgCollector{got: make(chan struct{}, 1), closed: make(chan struct{})}
	start := time.Now()
	_, err = openWebSocket(c.root, fmt.Sprintf("ws://127.0.0.1:%d/", l.Addr().(*net.TCPAddr).Port), mc)
	if err == nil || !strings.Contains(err.Error(), "handshake's answer is over") {
		t.Fatalf("webSocket = %v; want a refusal naming the handshake's size", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the refusal took %v", d)
	}
}

// TestWebSocketHeldBytesBounded: a remote that leaves a large fragmented
// message unfinished on each of a vat's WebSockets makes the switchboard
// hold at most maxWSHeld for that connection: the WebSocket that would
// pass it is closed with 1009 and a reason, the others go on, and what
// they held is given back when their messages are delivered.
func TestWebSocketHeldBytesBounded(t *testing.T) {
	part := make([]byte, 15<<20)
	finish := make(chan struct{})
	port := wsRemote(t, func(c net.Conn) {
		first := serverFrame(opBinary, part)
		first[0] &^= 0x80 // not the last fragment
		if _, err := c.Write(first); err != nil {
			return
		}
		<-finish
		_, _ = c.Write(serverFrame(opCont, []byte("end")))
		time.Sleep(5 * time.Second)
	})
	f := newFixture(t, nil)
	c := dial(t, f.local)
	const open = maxWSHeld/(15<<20) + 1
	var mcs []*msgCollector
	for i := range open {
		mc := &msgCollector{got: make(chan struct{}, 4), closed: make(chan struct{})}
		up, err := openWebSocket(c.root, fmt.Sprintf("ws://127.0.0.1:%d/", port), mc)
		if err != nil {
			t.Fatalf("webSocket %d: %v", i, err)
		}
		defer up.Release()
		mcs = append(mcs, mc)
	}
	// One is closed for its size (two, rarely, when both reach the
	// limit before the first has given its bytes back).
	deadline := time.After(20 * time.Second)
	closed := func() (n int) {
		for _, mc := range mcs {
			select {
			case <-mc.closed:
				n++
			default:
			}
		}
		return n
	}
	for closed() == 0 {
		select {
		case <-deadline:
			t.Fatal("no WebSocket was closed: the switchboard holds more than maxWSHeld")
		case <-time.After(50 * time.Millisecond):
		}
	}
	close(finish)
	delivered := 0
	for i, mc := range mcs {
		select {
		case <-mc.got:
			mc.mu.Lock()
			n := len(mc.msgs[0])
			mc.mu.Unlock()
			if n != len(part)+3 {
				t.Errorf("WebSocket %d: a message of %d bytes; want %d", i, n, len(part)+3)
			}
			delivered++
		case <-mc.closed:
			mc.mu.Lock()
			code, reason := mc.code, mc.reason
			mc.mu.Unlock()
			if code != 1009 || !strings.Contains(reason, "messages not yet delivered") {
				t.Errorf("WebSocket %d closed with %d %q; want 1009 naming the limit", i, code, reason)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("WebSocket %d: no message", i)
		}
	}
	if delivered < open-2 {
		t.Errorf("%d of %d WebSockets had their message; want all but the one (or two) over the limit", delivered, open)
	}
	var held int64
	for range 100 {
		held = f.srv.wsHeld.Load()
		if held == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if held != 0 {
		t.Errorf("%d bytes still held once every message was delivered", held)
	}
}

// TestWebSocketDropsConnectionNamedFields: the fields a caller's Connection
// header names are for its own hop (RFC 9110 section 7.6.1), as in
// request(): the remote never sees them.
func TestWebSocketDropsConnectionNamedFields(t *testing.T) {
	seen := make(chan http.Header, 1)
	port := serveTCP(t, func(c net.Conn) {
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		seen <- req.Header
	})
	f := newFixture(t, nil)
	c := dial(t, f.local)
	mc := &msgCollector{got: make(chan struct{}, 1), closed: make(chan struct{})}
	fut, release := c.root.WebSocket(context.Background(), func(p schema.Handle_webSocket_Params) error {
		if err := p.SetUrl(fmt.Sprintf("ws://127.0.0.1:%d/", port)); err != nil {
			return err
		}
		hs, err := p.NewHeaders(3)
		if err != nil {
			return err
		}
		for i, kv := range [][2]string{{"Connection", "X-Proxy-Secret"}, {"X-Proxy-Secret", "s3cret"}, {"X-Keep", "k"}} {
			_ = hs.At(i).SetName(kv[0])
			_ = hs.At(i).SetValue(kv[1])
		}
		return p.SetDownstream(schema.MessageStream_ServerToClient(mc))
	})
	defer release()
	_, _ = fut.Struct() // the remote never answers the handshake properly
	select {
	case h := <-seen:
		if h.Get("X-Proxy-Secret") != "" || h.Get("X-Keep") != "k" {
			t.Errorf("the remote saw X-Proxy-Secret %q, X-Keep %q; want none and k", h.Get("X-Proxy-Secret"), h.Get("X-Keep"))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the remote saw no handshake")
	}
}

// stalledSends is a MessageStream whose sends never return until released
// (each runs on its own, as a caller that reads its connection but never
// answers would): it counts those in flight.
type stalledSends struct {
	n       atomic.Int64
	release chan struct{}
}

func (s *stalledSends) Send(ctx context.Context, call schema.MessageStream_send) error {
	call.Go()
	s.n.Add(1)
	<-s.release
	return nil
}

func (s *stalledSends) Close(ctx context.Context, call schema.MessageStream_close) error { return nil }

// TestWebSocketTinyMessagesBounded: a remote that sends empty messages to a
// caller that never answers them. Each costs the switchboard a call in
// flight (~7 KiB) but counted 128 bytes of the 1 MiB window: one WebSocket
// held 8,192 of them (~60 MiB), one peer's connection window ten times
// that. Each now counts for wire.MessageCost.
func TestWebSocketTinyMessagesBounded(t *testing.T) {
	port := wsRemote(t, func(c net.Conn) {
		empty := serverFrame(opBinary, nil)
		w := bufio.NewWriterSize(c, 64<<10)
		for range 20000 {
			if _, err := w.Write(empty); err != nil {
				return
			}
		}
		_ = w.Flush()
		time.Sleep(10 * time.Second)
	})
	f := newFixture(t, nil)
	c := dial(t, f.local)
	down := &stalledSends{release: make(chan struct{})}
	defer close(down.release)
	fut, release := c.root.WebSocket(context.Background(), func(p schema.Handle_webSocket_Params) error {
		if err := p.SetUrl(fmt.Sprintf("ws://127.0.0.1:%d/", port)); err != nil {
			return err
		}
		return p.SetDownstream(schema.MessageStream_ServerToClient(down))
	})
	defer release()
	if _, err := fut.Struct(); err != nil {
		t.Fatal(err)
	}
	// Wait until the count stops growing.
	last, deadline := int64(-1), time.Now().Add(10*time.Second)
	for n := down.n.Load(); n != last && time.Now().Before(deadline); n = down.n.Load() {
		last = n
		time.Sleep(500 * time.Millisecond)
	}
	want := Limits{}.withDefaults().Window / wire.MessageCost
	if got := down.n.Load(); got == 0 || got > want+1 {
		t.Errorf("%d empty messages in flight to a caller that never answers; want 1 to %d (the window over wire.MessageCost)", got, want+1)
	}
}

// TestWebSocketSubprotocolMustBeOffered: a server that answers with a
// subprotocol the caller did not offer fails the handshake (RFC 6455 4.1);
// the caller would otherwise speak one protocol to a server speaking
// another it never asked for.
func TestWebSocketSubprotocolMustBeOffered(t *testing.T) {
	tests := []struct {
		name, offer, chosen string
		ok                  bool
	}{
		{"one of those offered", "chat, superchat", "superchat", true},
		{"none offered, none chosen", "", "", true},
		{"not offered", "chat", "admin", false},
		{"none offered", "", "chat", false},
		{"case differs", "chat", "Chat", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			go func() {
				defer server.Close()
				req, err := http.ReadRequest(bufio.NewReader(server))
				if err != nil {
					return
				}
				sum := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + wsGUID))
				answer := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + base64.StdEncoding.EncodeToString(sum[:]) + "\r\n"
				if tt.chosen != "" {
					answer += "Sec-WebSocket-Protocol: " + tt.chosen + "\r\n"
				}
				_, _ = io.WriteString(server, answer+"\r\n")
			}()
			h := http.Header{}
			if tt.offer != "" {
				h.Set("Sec-WebSocket-Protocol", tt.offer)
			}
			u, _ := url.Parse("ws://example.test/chat")
			got, err := wsHandshake(client, bufio.NewReader(client), u, "example.test", h)
			switch {
			case tt.ok && (err != nil || got != tt.chosen):
				t.Errorf("wsHandshake = %q, %v; want %q", got, err, tt.chosen)
			case !tt.ok && (err == nil || !strings.Contains(err.Error(), "not offered")):
				t.Errorf("wsHandshake = %q, %v; want a refusal naming the subprotocol", got, err)
			}
		})
	}
}
