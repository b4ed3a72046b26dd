package edge

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"sync"
)

// Framing follows the requests of one HTTP/1.x connection through the
// bytes its server reads, and says from which request on the connection
// must close after its answer.
//
// A request that carries both Content-Length and Transfer-Encoding, or
// Transfer-Encoding in HTTP/1.0, may be read as two different lengths by
// a proxy in front and by Go (which takes the Transfer-Encoding and drops
// the Content-Length before a handler sees either): the bytes one of them
// calls the body the other calls the next request (request smuggling).
// RFC 9112 section 6.1 says to close the connection after such a request;
// Go's server keeps it open. Framing finds them, and closes after any
// request it cannot follow for certain (a line longer than it keeps, an
// upgrade, framing Go itself refuses): a wrong guess costs a reconnect,
// never a smuggled request.
type Framing struct {
	mu      sync.Mutex
	st      state
	off     int64  // the bytes followed
	req     int    // the request being read, from 0
	served  int    // requests handed to Next so far
	doubt   int    // the first request whose answer closes; -1 while none
	why     string // the doubt's reason
	line    []byte // the line being read, up to its cap
	over    bool   // the line ran past its cap
	n       int64  // bytes left of a body or a chunk
	crlf    int    // bytes of a chunk's closing CRLF seen
	h       reqHeader
	onStart func(req int, off int64) // tests: where each request begins, to compare with Go's parser
}

// reqHeader is what the framing of one request depends on.
type reqHeader struct {
	http10, upgrade  bool
	te, cl           int // header lines seen
	teChunked, clBad bool
	clValue          string
	ours             bool // the last header line was one of the framing's
	sawLine          bool // a header line came (a first one cannot be folded)
}

type state uint8

const (
	stRequestLine state = iota
	stHeader
	stBody
	stChunkSize
	stChunkData
	stChunkEnd
	stTrailer
	stStopped // a doubt is recorded: the connection closes; nothing more to follow
)

// Line caps: a longer request line or chunk-size line is a doubt; a longer
// header line is a doubt only when it is one of the framing's own
// (Content-Length, Transfer-Encoding, Upgrade).
const (
	maxRequestLine = 16 << 10
	maxHeaderLine  = 1 << 10
	maxChunkLine   = 4096 // Go's own limit for a chunk-size line
)

// NewFraming returns the framing of a new connection.
func NewFraming() *Framing { return &Framing{doubt: -1} }

// Next is called once per request the server hands to its handler, in
// order. It reports whether the connection must close after this
// request's answer, and why.
func (f *Framing) Next() (closeAfter bool, why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := f.served
	f.served++
	if f.doubt >= 0 && k >= f.doubt {
		return true, f.why
	}
	return false, ""
}

// Scan follows p, the next bytes the server read from the connection.
func (f *Framing) Scan(p []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(p) > 0 && f.st != stStopped {
		used := f.step(p)
		f.off += int64(used)
		p = p[used:]
	}
}

// stop records that the connection closes after request k's answer.
func (f *Framing) stop(k int, why string) {
	if f.doubt < 0 || k < f.doubt {
		f.doubt, f.why = k, why
	}
	f.st = stStopped
}

// step takes what it can of p in the current state and returns how many
// bytes it took (at least one).
func (f *Framing) step(p []byte) int {
	switch f.st {
	case stBody, stChunkData:
		take := int64(len(p))
		if take > f.n {
			take = f.n
		}
		f.n -= take
		if f.n == 0 {
			if f.st == stBody {
				f.nextRequest()
			} else {
				f.st, f.crlf = stChunkEnd, 0
			}
		}
		return int(take)
	case stChunkEnd:
		if p[0] != "\r\n"[f.crlf] {
			f.stop(f.req, "a chunk does not end with CRLF")
			return 1
		}
		if f.crlf++; f.crlf == 2 {
			f.st = stChunkSize
		}
		return 1
	}
	// The line states.
	if f.st == stRequestLine && len(f.line) == 0 && !f.over && f.onStart != nil {
		f.onStart(f.req, f.off)
	}
	i := bytes.IndexByte(p, '\n')
	part := p
	if i >= 0 {
		part = p[:i]
	}
	if room := f.lineCap() - len(f.line); len(part) > room {
		f.line = append(f.line, part[:room]...)
		f.over = true
	} else {
		f.line = append(f.line, part...)
	}
	if i < 0 {
		return len(p)
	}
	line, over := f.line, f.over
	cr := len(line) > 0 && line[len(line)-1] == '\r'
	if cr && !over {
		line = line[:len(line)-1]
	}
	f.endLine(line, over, cr)
	f.line, f.over = f.line[:0], false
	return i + 1
}

func (f *Framing) lineCap() int {
	switch f.st {
	case stRequestLine:
		return maxRequestLine
	case stChunkSize:
		return maxChunkLine
	}
	return maxHeaderLine
}

// endLine handles one whole line (without its LF, and its CR unless over).
func (f *Framing) endLine(line []byte, over, cr bool) {
	switch f.st {
	case stRequestLine:
		f.requestLine(line, over)
	case stHeader:
		f.headerLine(line, over)
	case stChunkSize:
		f.chunkSize(line, over, cr)
	case stTrailer:
		switch {
		case over:
			// A long trailer line: fine, it is not framing.
		case !cr:
			// Go wants the trailer to end with CRLF CRLF.
			f.stop(f.req, "a trailer line ends without CR")
		case len(line) == 0:
			f.nextRequest()
		}
	}
}

func (f *Framing) requestLine(line []byte, over bool) {
	if over {
		f.stop(f.req, "a request line too long to follow")
		return
	}
	f.h = reqHeader{}
	sp := bytes.LastIndexByte(line, ' ')
	method, _, _ := bytes.Cut(line, []byte(" "))
	if sp < 0 || len(line) == 0 {
		f.stop(f.req, "a request line that is not one")
		return
	}
	switch string(line[sp+1:]) {
	case "HTTP/1.1":
	case "HTTP/1.0":
		f.h.http10 = true
	default:
		f.stop(f.req, "an HTTP version other than 1.0 or 1.1")
		return
	}
	if string(method) == "CONNECT" {
		f.h.upgrade = true
	}
	f.st = stHeader
}

func (f *Framing) headerLine(line []byte, over bool) {
	if len(line) == 0 && !over {
		f.endHeader()
		return
	}
	if line[0] == ' ' || line[0] == '\t' {
		// A continuation of the line before (obs-fold).
		if f.h.ours || !f.h.sawLine {
			f.stop(f.req, "a folded framing header")
		}
		return
	}
	f.h.sawLine = true
	name, value, found := bytes.Cut(line, []byte(":"))
	if !found {
		f.h.ours = false
		if over {
			// The name may go on past the cap; it cannot be a framing
			// header if it is longer than any of theirs.
			return
		}
		f.stop(f.req, "a header line without a colon")
		return
	}
	value = bytes.Trim(value, " \t")
	lower := bytes.ToLower(bytes.TrimRight(name, " \t"))
	f.h.ours = true
	switch string(lower) {
	case "transfer-encoding":
		f.h.te++
		f.h.teChunked = !over && bytes.EqualFold(value, []byte("chunked"))
	case "content-length":
		f.h.cl++
		v := string(value)
		if over || v == "" || !allDigits(v) || f.h.clValue != "" && f.h.clValue != v {
			f.h.clBad = true
		}
		f.h.clValue = v
	case "upgrade":
		f.h.upgrade = true
	default:
		f.h.ours = false
		return
	}
	if len(lower) != len(name) {
		// "Content-Length :" : Go refuses the request; stop either way.
		f.stop(f.req, "a framing header with space before its colon")
	}
}

// endHeader decides the body's framing, as Go reads it, once the header
// block of request f.req has ended.
func (f *Framing) endHeader() {
	h := f.h
	switch {
	case h.te > 0 && h.cl > 0:
		f.stop(f.req, "both Content-Length and Transfer-Encoding (RFC 9112 section 6.1)")
		return
	case h.te > 0 && h.http10:
		f.stop(f.req, "Transfer-Encoding in an HTTP/1.0 request (RFC 9112 section 6.1)")
		return
	case h.te > 1 || h.te == 1 && !h.teChunked:
		f.stop(f.req, "a Transfer-Encoding other than one chunked")
		return
	case h.clBad:
		f.stop(f.req, "a Content-Length that is not one number")
		return
	}
	if h.upgrade {
		// After an upgrade the connection is no longer HTTP; if the
		// upgrade is not taken, what follows is not followed here.
		f.stop(f.req+1, "a request after an upgrade request")
		return
	}
	switch {
	case h.te == 1:
		f.st = stChunkSize
	case h.cl > 0:
		n, err := strconv.ParseInt(h.clValue, 10, 64)
		if err != nil {
			f.stop(f.req, "a Content-Length too large")
			return
		}
		if n == 0 {
			f.nextRequest()
			return
		}
		f.st, f.n = stBody, n
	default:
		f.nextRequest()
	}
}

func (f *Framing) chunkSize(line []byte, over, cr bool) {
	if over {
		f.stop(f.req, "a chunk-size line too long to follow")
		return
	}
	if !cr || bytes.IndexByte(line, '\r') >= 0 {
		// Go wants CRLF there, and no other CR.
		f.stop(f.req, "a chunk-size line not ended by CRLF")
		return
	}
	line = bytes.TrimRight(line, " \t")
	if semi := bytes.IndexByte(line, ';'); semi >= 0 {
		line = line[:semi]
	}
	if len(line) == 0 || len(line) > 16 {
		f.stop(f.req, "a chunk size that is not one")
		return
	}
	n, err := strconv.ParseUint(string(line), 16, 64)
	if err != nil || n > 1<<62 {
		f.stop(f.req, "a chunk size that is not one")
		return
	}
	if n == 0 {
		f.st = stTrailer
		return
	}
	f.st, f.n = stChunkData, int64(n)
}

func (f *Framing) nextRequest() {
	f.req++
	f.st = stRequestLine
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Listener wraps l so that each connection it accepts follows its
// framing (see Framing; ConnContext finds it).
func Listener(l net.Listener) net.Listener { return &listener{Listener: l} }

type listener struct{ net.Listener }

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, f: NewFraming()}, nil
}

type conn struct {
	net.Conn
	f *Framing
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.f.Scan(p[:n])
	return n, err
}

// NetConn returns the connection c wraps.
func (c *conn) NetConn() net.Conn { return c.Conn }

type framingKey struct{}

// ConnContext is an http.Server's ConnContext: it puts the connection's
// Framing (a connection from Listener, or one wrapping one and saying so
// with a NetConn method, as *tls.Conn does) in ctx.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	for c != nil {
		if ec, ok := c.(*conn); ok {
			return context.WithValue(ctx, framingKey{}, ec.f)
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = u.NetConn()
	}
	return ctx
}

// FramingOf returns the Framing ConnContext put in ctx, or nil.
func FramingOf(ctx context.Context) *Framing {
	f, _ := ctx.Value(framingKey{}).(*Framing)
	return f
}
