package mcp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// MaxMessage is the largest message a bridge reads by default: 32 MiB,
// far above any tool result in use, small enough that a vat cannot make
// the bridge hold much more than that per process.
const MaxMessage = 32 << 20

// prefixKept is how much of a line past the limit is kept: enough for the
// id, which a response's writer puts near the start.
const prefixKept = 4096

// ErrTooLong is a line past the reader's limit; it was read to its end
// and dropped.
var ErrTooLong = errors.New("line exceeds the message limit")

// LineReader reads newline-framed messages (the stdio transport) of any
// length up to Max without the 64 KiB limit of bufio.Scanner. A longer
// line is read to its newline in discard mode and reported as ErrTooLong
// with its first bytes, so the stream goes on.
type LineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewLineReader reads r. If max is zero, MaxMessage.
func NewLineReader(r io.Reader, max int) *LineReader {
	if max <= 0 {
		max = MaxMessage
	}
	return &LineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next line without its line ending ("\n" or "\r\n").
// The slice is valid until the next call. On ErrTooLong it holds the
// line's first bytes and n is the line's whole length. At the end of the
// input a last line with no newline is returned, then io.EOF.
func (l *LineReader) Next() (line []byte, n int64, err error) {
	l.buf = l.buf[:0]
	over := false
	for {
		chunk, rerr := l.r.ReadSlice('\n')
		n += int64(len(chunk))
		if !over {
			if len(l.buf)+len(chunk) > l.max+2 { // +2: the line ending
				over = true
				room := max(0, prefixKept-len(l.buf))
				l.buf = append(l.buf, chunk[:min(room, len(chunk))]...)
			} else {
				l.buf = append(l.buf, chunk...)
			}
		}
		switch {
		case rerr == nil:
			return l.finish(n, over)
		case errors.Is(rerr, bufio.ErrBufferFull):
			continue
		case errors.Is(rerr, io.EOF):
			if n == 0 {
				return nil, 0, io.EOF
			}
			return l.finish(n, over)
		default:
			return nil, n, rerr
		}
	}
}

func (l *LineReader) finish(n int64, over bool) ([]byte, int64, error) {
	line := bytes.TrimSuffix(l.buf, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	if over || len(line) > l.max {
		return line[:min(len(line), prefixKept)], n, ErrTooLong
	}
	// A big buffer is not kept for the next, usually small, line.
	if cap(l.buf) > 1<<20 {
		out := line
		l.buf = nil
		return out, n, nil
	}
	return line, n, nil
}

// PrefixID returns the id of a message of which only the first bytes are
// at hand (a line past the limit), when they name it at the top level
// before anything they cut.
func PrefixID(prefix []byte) ([]byte, bool) {
	i := skipSpace(prefix, 0)
	if i >= len(prefix) || prefix[i] != '{' {
		return nil, false
	}
	i = skipSpace(prefix, i+1)
	for i < len(prefix) && prefix[i] == '"' {
		ke, err := skipString(prefix, i)
		if err != nil {
			return nil, false
		}
		key, err := decodeKey(prefix[i:ke])
		if err != nil {
			return nil, false
		}
		i = skipSpace(prefix, ke)
		if i >= len(prefix) || prefix[i] != ':' {
			return nil, false
		}
		vs := skipSpace(prefix, i+1)
		ve, err := skipValue(prefix, vs)
		if err != nil || ve >= len(prefix) {
			return nil, false // the value runs past what is at hand
		}
		if key == "id" {
			id := prefix[vs:ve]
			return id, ValidID(id)
		}
		i = skipSpace(prefix, ve)
		if i >= len(prefix) || prefix[i] != ',' {
			return nil, false
		}
		i = skipSpace(prefix, i+1)
	}
	return nil, false
}
