package entry

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
)

// The proxy reads requests itself rather than with net/http: that package
// (and crypto/tls under it) is most of the entry's start-up work, and the
// entry starts before every app that has a way out. What it accepts is the
// small part of HTTP/1.1 a forward proxy needs: a request line, headers,
// and a body framed by Content-Length or chunked.

// Limits of one request's head.
const (
	maxRequestLine = 8 << 10
	maxHeaderBytes = 64 << 10
)

// request is one proxy request.
type request struct {
	Method string
	Target string   // the request target as sent (CONNECT: host:port)
	URL    *url.URL // parsed Target (absolute-form); nil for CONNECT
	Header textproto.MIMEHeader
	// Host is the Host header, or the URL's host when there is none.
	Host string
	// ContentLength is the body's length, -1 when chunked, 0 when none.
	ContentLength int64
	// Body reads the body (never nil).
	Body io.Reader
}

// errTooLarge is a request head past the limits.
var errTooLarge = errors.New("request head too large")

// readRequest reads one request head from br. The body, if any, is left
// in br for Body.
func readRequest(br *bufio.Reader) (*request, error) {
	line, err := readLine(br, maxRequestLine)
	if err != nil {
		return nil, err
	}
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || method == "" || target == "" || !validToken(method) {
		return nil, fmt.Errorf("malformed request line %q", line)
	}
	if proto != "HTTP/1.1" && proto != "HTTP/1.0" {
		return nil, fmt.Errorf("unsupported protocol %q", proto)
	}
	h, err := readHeader(br)
	if err != nil {
		return nil, err
	}
	r := &request{Method: method, Target: target, Header: h, Body: eofReader{}}
	if method != "CONNECT" {
		if r.URL, err = url.ParseRequestURI(target); err != nil {
			return nil, fmt.Errorf("request target %q: %w", target, err)
		}
	}
	// The host of an absolute-form target replaces any Host header (RFC
	// 9112 section 3.2.2): the request goes where the URL the switchboard
	// judged says, to no other virtual host.
	if hosts := h.Values("Host"); len(hosts) > 1 {
		return nil, errors.New("more than one Host header")
	} else if r.URL != nil && r.URL.Host != "" {
		r.Host = r.URL.Host
	} else if len(hosts) == 1 {
		r.Host = hosts[0]
	}
	if err := r.framing(br); err != nil {
		return nil, err
	}
	return r, nil
}

// framing reads how the body is delimited (RFC 9112 section 6): chunked
// when Transfer-Encoding ends in chunked, else Content-Length, else none.
// Ambiguous framing, the kind a smuggled request hides in, is an error.
func (r *request) framing(br *bufio.Reader) error {
	te := r.Header.Values("Transfer-Encoding")
	cl := r.Header.Values("Content-Length")
	switch {
	case len(te) > 0 && len(cl) > 0:
		return errors.New("both Transfer-Encoding and Content-Length")
	case len(te) > 0:
		if len(te) != 1 || !strings.EqualFold(strings.TrimSpace(te[0]), "chunked") {
			return fmt.Errorf("unsupported Transfer-Encoding %q", strings.Join(te, ", "))
		}
		r.ContentLength = -1
		r.Body = &chunkedReader{br: br}
	case len(cl) > 0:
		for _, v := range cl[1:] {
			if v != cl[0] {
				return errors.New("conflicting Content-Length headers")
			}
		}
		n, err := strconv.ParseInt(strings.TrimSpace(cl[0]), 10, 64)
		if err != nil || n < 0 || strings.HasPrefix(strings.TrimSpace(cl[0]), "+") {
			return fmt.Errorf("bad Content-Length %q", cl[0])
		}
		r.ContentLength = n
		if n > 0 {
			r.Body = &lengthReader{br: br, left: n}
		}
	}
	return nil
}

// readHeader reads header fields up to the empty line.
func readHeader(br *bufio.Reader) (textproto.MIMEHeader, error) {
	h := textproto.MIMEHeader{}
	total := 0
	for {
		line, err := readLine(br, maxHeaderBytes-total)
		if err != nil {
			return nil, err
		}
		total += len(line) + 2
		if line == "" {
			return h, nil
		}
		if line[0] == ' ' || line[0] == '\t' {
			return nil, errors.New("obsolete line folding in a header")
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok || name == "" || !validToken(name) {
			return nil, fmt.Errorf("malformed header line %q", line)
		}
		value = strings.Trim(value, " \t")
		if strings.ContainsAny(value, "\x00\r\n") {
			return nil, fmt.Errorf("header %s holds a control character", name)
		}
		k := textproto.CanonicalMIMEHeaderKey(name)
		h[k] = append(h[k], value)
	}
}

// readLine reads one CRLF- (or LF-) terminated line of at most max bytes.
func readLine(br *bufio.Reader, max int) (string, error) {
	var b []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(b)+len(frag) > max+2 {
			return "", errTooLarge
		}
		b = append(b, frag...)
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) && len(b) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
	}
	b = b[:len(b)-1]
	if len(b) > 0 && b[len(b)-1] == '\r' {
		b = b[:len(b)-1]
	}
	return string(b), nil
}

// validToken reports whether s is an RFC 9110 token (methods, field names).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// lengthReader reads a body of a known length: the connection ending
// before the last byte is io.ErrUnexpectedEOF, not the body's end.
type lengthReader struct {
	br   *bufio.Reader
	left int64
}

func (l *lengthReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.br.Read(p)
	l.left -= int64(n)
	if errors.Is(err, io.EOF) && l.left > 0 {
		err = io.ErrUnexpectedEOF
	} else if err == nil && l.left == 0 {
		err = io.EOF
	}
	return n, err
}

// chunkedReader decodes a chunked body (RFC 9112 section 7.1); trailers
// are read and dropped.
type chunkedReader struct {
	br   *bufio.Reader
	left int64 // bytes left in the current chunk
	done bool
	err  error
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	for c.err == nil && !c.done && c.left == 0 {
		c.err = c.next()
	}
	if c.err != nil {
		return 0, c.err
	}
	if c.done {
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.br.Read(p)
	c.left -= int64(n)
	if c.left == 0 && err == nil {
		// The chunk's CRLF.
		if line, lerr := readLine(c.br, 0); lerr != nil || line != "" {
			c.err = errors.New("malformed chunk end")
		}
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		c.err = err
	}
	return n, err
}

// next reads a chunk-size line; a zero size ends the body.
func (c *chunkedReader) next() error {
	line, err := readLine(c.br, 1024)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	size, _, _ := strings.Cut(line, ";") // chunk extensions are ignored
	size = strings.TrimSpace(size)
	n, err := strconv.ParseInt(size, 16, 64)
	if err != nil || n < 0 || size == "" || strings.HasPrefix(size, "+") || strings.HasPrefix(size, "-") {
		return fmt.Errorf("malformed chunk size %q", line)
	}
	if n > 0 {
		c.left = n
		return nil
	}
	// The last chunk: trailers up to the empty line.
	if _, err := readHeader(c.br); err != nil {
		return err
	}
	c.done = true
	return nil
}

// reasons are the reason phrases of RFC 9110's status codes.
var reasons = map[int]string{
	100: "Continue", 101: "Switching Protocols",
	200: "OK", 201: "Created", 202: "Accepted", 203: "Non-Authoritative Information", 204: "No Content",
	205: "Reset Content", 206: "Partial Content",
	300: "Multiple Choices", 301: "Moved Permanently", 302: "Found", 303: "See Other", 304: "Not Modified",
	305: "Use Proxy", 307: "Temporary Redirect", 308: "Permanent Redirect",
	400: "Bad Request", 401: "Unauthorized", 402: "Payment Required", 403: "Forbidden", 404: "Not Found",
	405: "Method Not Allowed", 406: "Not Acceptable", 407: "Proxy Authentication Required", 408: "Request Timeout",
	409: "Conflict", 410: "Gone", 411: "Length Required", 412: "Precondition Failed", 413: "Content Too Large",
	414: "URI Too Long", 415: "Unsupported Media Type", 416: "Range Not Satisfiable", 417: "Expectation Failed",
	421: "Misdirected Request", 422: "Unprocessable Content", 426: "Upgrade Required", 428: "Precondition Required",
	429: "Too Many Requests", 431: "Request Header Fields Too Large", 451: "Unavailable For Legal Reasons",
	500: "Internal Server Error", 501: "Not Implemented", 502: "Bad Gateway", 503: "Service Unavailable",
	504: "Gateway Timeout", 505: "HTTP Version Not Supported",
}

// statusText is the reason phrase of code ("" when it has none: the
// status line is still valid).
func statusText(code int) string { return reasons[code] }
