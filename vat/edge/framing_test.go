package edge

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

const (
	get1      = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
	postCL    = "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
	postTE    = "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\n\r\n"
	postTrail = "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n"
	// CL.TE: a front proxy that reads Content-Length sends one request;
	// Go reads the chunked body and then a second, smuggled one.
	smuggle = "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n"
)

var framingTests = []struct {
	name   string
	stream string
	want   []bool // per request: does its answer close the connection
}{
	{"gets", get1 + get1 + get1, []bool{false, false, false}},
	{"bare LF headers", "GET / HTTP/1.1\nHost: x\n\n" + get1, []bool{false, false}},
	{"content-length bodies", postCL + get1 + postCL, []bool{false, false, false}},
	{"content-length twice, same", "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello" + get1, []bool{false, false}},
	{"chunked bodies", postTE + get1 + postTrail + get1, []bool{false, false, false, false}},
	{"body looks like a request", "POST / HTTP/1.1\r\nContent-Length: 26\r\n\r\nGET / HTTP/1.1\r\nA: b\r\n\r\n\r\n" + get1, []bool{false, false}},
	{"CL and TE", smuggle, []bool{true}},
	{"TE and CL, other order", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n", []bool{true}},
	{"CL and TE after clean ones", get1 + postTE + smuggle, []bool{false, false, true}},
	{"CL and TE, lower case", "POST / HTTP/1.1\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n", []bool{true}},
	{"CL and TE, not chunked", "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: gzip\r\n\r\nabc", []bool{true}},
	{"TE in HTTP/1.0", "POST / HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc", []bool{true}},
	{"TE alone in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", []bool{true}},
	{"two TE lines", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", []bool{true}},
	{"TE list", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", []bool{true}},
	{"CL differing", "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", []bool{true}},
	{"CL not a number", "POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc", []bool{true}},
	{"CL with space before colon", "POST / HTTP/1.1\r\nContent-Length : 3\r\n\r\nabc", []bool{true}},
	{"folded TE", "POST / HTTP/1.1\r\nTransfer-Encoding:\r\n chunked\r\nContent-Length: 3\r\n\r\nabc", []bool{true}},
	{"folded other header", "GET / HTTP/1.1\r\nX-A: 1\r\n 2\r\n\r\n" + get1, []bool{false, false}},
	{"chunk line bare LF", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\n\r\n" + get1, []bool{true}},
	{"chunk not ended by CRLF", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\naXY0\r\n\r\n" + get1, []bool{true}},
	{"chunk size not hex", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" + get1, []bool{true}},
	{"upgrade then more", "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n" + get1 + get1, []bool{false, true}},
	{"connect", "CONNECT x:443 HTTP/1.1\r\n\r\n" + get1, []bool{false, true}},
	{"long header line", "GET / HTTP/1.1\r\nX-Long: " + strings.Repeat("a", 3*maxHeaderLine) + "\r\n\r\n" + get1, []bool{false, false}},
	{"long CL line", "POST / HTTP/1.1\r\nContent-Length: " + strings.Repeat("0", 2*maxHeaderLine) + "3\r\n\r\nabc" + get1, []bool{true}},
	{"long request line", "GET /" + strings.Repeat("a", maxRequestLine) + " HTTP/1.1\r\n\r\n" + get1, []bool{true}},
	{"HTTP/1.2", "GET / HTTP/1.2\r\n\r\n" + get1, []bool{true}},
}

// TestFraming feeds each stream whole, then byte by byte: the framing must
// not depend on how reads split it.
func TestFraming(t *testing.T) {
	for _, tt := range framingTests {
		t.Run(tt.name, func(t *testing.T) {
			for _, split := range []int{0, 1, 7} {
				f := NewFraming()
				feed(f, tt.stream, split)
				for k, want := range tt.want {
					if got, why := f.Next(); got != want || got != (why != "") {
						t.Errorf("split %d: request %d: close after = %v (%q); want %v", split, k, got, why, want)
					}
				}
			}
		})
	}
}

// TestFramingBeforeItsBytes: the server may hand a request to its handler
// before later bytes arrive; what comes later does not change an earlier
// answer's fate.
func TestFramingBeforeItsBytes(t *testing.T) {
	f := NewFraming()
	f.Scan([]byte(get1))
	if c, _ := f.Next(); c {
		t.Fatal("a clean GET closes")
	}
	f.Scan([]byte(smuggle))
	if c, why := f.Next(); !c || !strings.Contains(why, "Content-Length and Transfer-Encoding") {
		t.Fatalf("the smuggling request: close = %v (%q); want true, naming both headers", c, why)
	}
}

// feed scans s in pieces of split bytes (0: whole).
func feed(f *Framing, s string, split int) {
	if split == 0 {
		f.Scan([]byte(s))
		return
	}
	for i := 0; i < len(s); i += split {
		f.Scan([]byte(s[i:min(i+split, len(s))]))
	}
}

// goOffsets reads stream with Go's own parser, as its server does, and
// returns where each request it read began, up to the first it refuses.
func goOffsets(stream []byte) []int64 {
	cr := &countReader{r: bytes.NewReader(stream)}
	br := bufio.NewReader(cr)
	var offs []int64
	for {
		off := cr.n - int64(br.Buffered())
		req, err := http.ReadRequest(br)
		if err != nil {
			return offs
		}
		offs = append(offs, off)
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return offs
		}
		if req.Method == "CONNECT" || req.Header.Get("Upgrade") != "" {
			return offs
		}
	}
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// FuzzFraming holds the framing to Go's own parser: every request Go reads
// before the first one the framing doubts begins where the framing says
// it does (so the framing never loses its place while calling a request
// clean), and splitting the stream differently changes nothing.
func FuzzFraming(f *testing.F) {
	for _, tt := range framingTests {
		f.Add([]byte(tt.stream), uint8(3))
	}
	f.Fuzz(func(t *testing.T, stream []byte, split uint8) {
		var starts []int64
		fr := NewFraming()
		fr.onStart = func(_ int, off int64) { starts = append(starts, off) }
		feed(fr, string(stream), int(split))
		whole := NewFraming()
		whole.Scan(stream)
		if fr.doubt != whole.doubt || fr.req != whole.req {
			t.Fatalf("split %d: doubt %d at request %d; whole: doubt %d at request %d", split, fr.doubt, fr.req, whole.doubt, whole.req)
		}
		offs := goOffsets(stream)
		for k, off := range offs {
			if fr.doubt >= 0 && k >= fr.doubt {
				break
			}
			if k >= len(starts) || starts[k] != off {
				t.Fatalf("Go read request %d at offset %d; the framing has %v (doubt %d: %s)", k, off, starts, fr.doubt, fr.why)
			}
		}
	})
}
