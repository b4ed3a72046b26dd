package entry

import (
	"bufio"
	"io"
	"strings"
	"testing"
)

func TestReadRequest(t *testing.T) {
	tests := []struct {
		name, in string
		wantErr  string
		check    func(t *testing.T, r *request, rest string)
	}{
		{name: "connect", in: "CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\nhello", check: func(t *testing.T, r *request, rest string) {
			if r.Method != "CONNECT" || r.Target != "example.org:443" || r.URL != nil || r.ContentLength != 0 {
				t.Errorf("got %+v", r)
			}
			if rest != "hello" {
				t.Errorf("bytes after the head = %q; want them left for the tunnel", rest)
			}
		}},
		{name: "absolute form, the URL's host wins", in: "GET http://example.org:8080/a?b=c HTTP/1.1\r\nHost: internal.example\r\nX-A: 1\r\nx-a: 2\r\n\r\n", check: func(t *testing.T, r *request, _ string) {
			if r.URL.Host != "example.org:8080" || r.Host != "example.org:8080" {
				t.Errorf("URL host %q, Host %q; want the URL's for both", r.URL.Host, r.Host)
			}
			if got := r.Header.Values("X-A"); len(got) != 2 {
				t.Errorf("X-A = %v", got)
			}
		}},
		{name: "content length", in: "POST http://e.org/ HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloEXTRA", check: func(t *testing.T, r *request, _ string) {
			b, _ := io.ReadAll(r.Body)
			if string(b) != "hello" || r.ContentLength != 5 {
				t.Errorf("body %q length %d", b, r.ContentLength)
			}
		}},
		{name: "chunked", in: "POST http://e.org/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\n", check: func(t *testing.T, r *request, _ string) {
			b, err := io.ReadAll(r.Body)
			if err != nil || string(b) != "hello world" || r.ContentLength != -1 {
				t.Errorf("body %q err %v length %d", b, err, r.ContentLength)
			}
		}},
		{name: "LF only", in: "GET http://e.org/ HTTP/1.0\nHost: e.org\n\n"},
		{name: "smuggling: both framings", in: "POST http://e.org/ HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n", wantErr: "both"},
		{name: "smuggling: two lengths", in: "POST http://e.org/ HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\n", wantErr: "conflicting"},
		{name: "smuggling: signed length", in: "POST http://e.org/ HTTP/1.1\r\nContent-Length: +4\r\n\r\n", wantErr: "Content-Length"},
		{name: "smuggling: other coding", in: "POST http://e.org/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", wantErr: "Transfer-Encoding"},
		{name: "obsolete folding", in: "GET http://e.org/ HTTP/1.1\r\nX-A: 1\r\n 2\r\n\r\n", wantErr: "folding"},
		{name: "space before colon", in: "GET http://e.org/ HTTP/1.1\r\nHost : e.org\r\n\r\n", wantErr: "malformed header"},
		{name: "two hosts", in: "GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", wantErr: "Host"},
		{name: "bad method", in: "G(T http://e.org/ HTTP/1.1\r\n\r\n", wantErr: "request line"},
		{name: "no protocol", in: "GET http://e.org/\r\n\r\n", wantErr: "request line"},
		{name: "HTTP/2", in: "GET http://e.org/ HTTP/2.0\r\n\r\n", wantErr: "protocol"},
		{name: "huge line", in: "GET http://e.org/" + strings.Repeat("a", 9000) + " HTTP/1.1\r\n\r\n", wantErr: "too large"},
		{name: "huge head", in: "GET http://e.org/ HTTP/1.1\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("a", 1000)+"\r\n", 70) + "\r\n", wantErr: "too large"},
		{name: "cut short", in: "GET http://e.org/ HTTP/1.1\r\nHost: e", wantErr: "unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br := bufio.NewReader(strings.NewReader(tt.in))
			r, err := readRequest(br)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("readRequest = %v; want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("readRequest: %v", err)
			}
			if tt.check != nil {
				if r.Method != "CONNECT" {
					tt.check(t, r, "") // reads the body
					return
				}
				rest, _ := io.ReadAll(br)
				tt.check(t, r, string(rest))
			}
		})
	}
}

func TestChunkedReaderRefusesGarbage(t *testing.T) {
	for _, in := range []string{"zz\r\nhello\r\n0\r\n\r\n", "5\r\nhelloXX0\r\n\r\n", "-5\r\nhello\r\n0\r\n\r\n", "5\r\nhel"} {
		c := &chunkedReader{br: bufio.NewReader(strings.NewReader(in))}
		if b, err := io.ReadAll(c); err == nil {
			t.Errorf("chunked %q read as %q with no error", in, b)
		}
	}
}

func FuzzReadRequest(f *testing.F) {
	f.Add("CONNECT a:1 HTTP/1.1\r\n\r\n")
	f.Add("POST http://e.org/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
	f.Fuzz(func(t *testing.T, in string) {
		r, err := readRequest(bufio.NewReader(strings.NewReader(in)))
		if err != nil {
			return
		}
		if r.Method == "" || r.Target == "" || r.Body == nil {
			t.Fatalf("accepted %q as %+v", in, r)
		}
		if r.Method != "CONNECT" && r.URL == nil {
			t.Fatalf("no URL for %q", in)
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	})
}
