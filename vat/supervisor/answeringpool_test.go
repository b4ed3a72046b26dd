package supervisor

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"toybox/vat/words"
)

// keepAliveApp is an app that keeps its connections open between requests
// (HTTP/1.1 keep-alive, as most servers do); /slow answers after a second.
const keepAliveApp = `#!/usr/bin/python3
import os, socketserver, time
from http.server import BaseHTTPRequestHandler
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path.endswith("/slow"):
            time.sleep(1)
        b = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    def get_request(self):
        c, _ = self.socket.accept()
        return c, ("app", 0)
p = os.environ["TOYBOX_LISTEN"]
try:
    os.unlink(p)
except FileNotFoundError:
    pass
S(p, H).serve_forever()
`

// TestNotAnsweringComesBackOnAPooledConnection: a dial that found nothing
// on the app's socket said "not answering"; the word came back only with
// the next dial that connected. Requests on the connections the proxy
// keeps open to the app dial nothing, so an app that answered every one
// of them kept "not answering" for as long as those connections lived.
func TestNotAnsweringComesBackOnAPooledConnection(t *testing.T) {
	s, st, _ := unwalledSupervisor(t, time.Second)
	code, err := st.Put(strings.NewReader(keepAliveApp), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Install(InstallRequest{ID: "kept", Code: code}); err != nil {
		t.Fatal(err)
	}
	pub := s.PublicHandler()
	get := func(path string) int {
		w := httptest.NewRecorder()
		pub.ServeHTTP(w, httptest.NewRequest("GET", "/kept"+path, nil))
		return w.Code
	}
	// Install does not wait for the app to listen (python takes a while
	// on a busy host): until then the vat is starting (503).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c := get("/")
		if c == http.StatusOK {
			break
		}
		if c != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("before: %d", c)
		}
	}
	serving, _ := s.Status("kept")
	sock := filepath.Join(st.RunDir("kept"), "app.sock")
	// The kept connection is busy with a slow request while another comes:
	// that one dials, and finds the socket gone.
	slow := make(chan int, 1)
	go func() { slow <- get("/slow") }()
	time.Sleep(200 * time.Millisecond)
	if err := os.Rename(sock, sock+".aside"); err != nil {
		t.Fatal(err)
	}
	if c := get("/"); c != http.StatusBadGateway {
		t.Fatalf("with its socket gone: %d; want 502", c)
	}
	if got, _ := s.Status("kept"); got.Status != words.NotAnswering.String() {
		t.Fatalf("with its socket gone: %q; want %q", got.Status, words.NotAnswering)
	}
	if err := os.Rename(sock+".aside", sock); err != nil {
		t.Fatal(err)
	}
	if c := <-slow; c != http.StatusOK {
		t.Fatalf("slow request: %d", c)
	}
	for range 3 {
		if c := get("/"); c != http.StatusOK {
			t.Fatalf("with its socket back: %d", c)
		}
	}
	if got, _ := s.Status("kept"); got.Status != serving.Status {
		t.Errorf("after three requests the app answered: status %q; want %q again", got.Status, serving.Status)
	}
}
