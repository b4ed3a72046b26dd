package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"toybox/tests/testenv"
	"toybox/vat/words"
)

// TestNotAnsweringIsSaid: an app that stops accepting on its socket (here
// the socket is moved away while the app runs) kept its serving word while
// every visitor got a 502. The first request that finds nothing accepting
// turns the word into NotAnswering with the reason; the first one the app
// accepts again brings its word back.
func TestNotAnsweringIsSaid(t *testing.T) {
	s, st, _ := unwalledSupervisor(t, time.Second)
	code := storeFile(t, st, shellScriptApp(t))
	if _, _, err := s.Install(InstallRequest{ID: "deaf", Code: code}); err != nil {
		t.Fatal(err)
	}
	pub := s.PublicHandler()
	get := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		pub.ServeHTTP(w, httptest.NewRequest("GET", "/deaf/", nil))
		return w
	}
	status := func() Status {
		t.Helper()
		st, err := s.Status("deaf")
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if w := get(); w.Code != http.StatusOK {
		t.Fatalf("before: %d %s", w.Code, w.Body)
	}
	serving := status().Status
	if serving != words.NotWalledOperator.String() {
		t.Fatalf("before: status %q; want %q", serving, words.NotWalledOperator)
	}

	sock := filepath.Join(st.RunDir("deaf"), "app.sock")
	if err := os.Rename(sock, sock+".aside"); err != nil {
		t.Fatal(err)
	}
	if w := get(); w.Code != http.StatusBadGateway {
		t.Fatalf("with its socket gone: %d %s; want 502", w.Code, w.Body)
	}
	got := status()
	if got.Status != words.NotAnswering.String() || !strings.Contains(got.LastError, "stopped answering on $TOYBOX_LISTEN") || !strings.Contains(got.LastError, "no such file") {
		t.Errorf("with its socket gone: status %q, last error %q; want %q and why", got.Status, got.LastError, words.NotAnswering)
	}
	if got.PID == 0 {
		t.Errorf("with its socket gone: pid 0; the app still runs")
	}

	if err := os.Rename(sock+".aside", sock); err != nil {
		t.Fatal(err)
	}
	if w := get(); w.Code != http.StatusOK {
		t.Fatalf("with its socket back: %d %s", w.Code, w.Body)
	}
	if got := status().Status; got != serving {
		t.Errorf("with its socket back: status %q; want %q again", got, serving)
	}
}

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
	testenv.WaitFor(t, 10*time.Second, func() error {
		switch c := get("/"); c {
		case http.StatusOK:
			return nil
		case http.StatusServiceUnavailable:
			return fmt.Errorf("before: %d", c)
		default:
			t.Fatalf("before: %d", c)
			return nil
		}
	})
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

// stuckProc is a spawn that runs until Stop.
type stuckProc struct {
	cmd     *exec.Cmd
	stopped chan struct{}
}

func (p *stuckProc) Pid() int     { return p.cmd.Process.Pid }
func (p *stuckProc) Tier() string { return "walled" }
func (p *stuckProc) Wait() error  { return p.cmd.Wait() }
func (p *stuckProc) Stop(time.Duration) error {
	select {
	case <-p.stopped:
	default:
		close(p.stopped)
	}
	return p.cmd.Process.Kill()
}

// TestWatchEndsAWallWhoseEntryLostItsCapability: a wall whose toybox-entry
// lost its capability connection and did not end on its own (an entry of
// an older build, or one stuck) is ended by the supervisor once
// entryLostGrace has passed, and the end is put down to the loss; one that
// ends by itself within the grace is an exit like any other.
func TestWatchEndsAWallWhoseEntryLostItsCapability(t *testing.T) {
	s, _ := testSupervisorWith(t, func(c *Config) { c.StopGrace = time.Second })
	for _, tt := range []struct {
		name     string
		exitsOwn bool
		wantLost bool
	}{
		{"stuck wall", false, true},
		{"wall that ends with its app", true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command("sleep", "60")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			p := &stuckProc{cmd: cmd, stopped: make(chan struct{})}
			ended := make(chan struct{})
			r := &running{proc: p, gone: make(chan struct{}), entryEnded: ended}
			go func() { r.exitErr = p.Wait(); close(r.gone) }()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			in := &instance{s: s, v: &vat{id: "lost"}, ctx: ctx}
			close(ended)
			if tt.exitsOwn {
				_ = cmd.Process.Kill()
			}
			began := time.Now()
			lost, stopped := in.watch(r)
			if lost != tt.wantLost || stopped {
				t.Errorf("watch = lost %v, stopped %v; want lost %v", lost, stopped, tt.wantLost)
			}
			select {
			case <-p.stopped:
				if !tt.wantLost {
					t.Error("the supervisor stopped a wall that ended on its own")
				}
				if d := time.Since(began); d < entryLostGrace {
					t.Errorf("stopped after %v; the grace is %v", d, entryLostGrace)
				}
			default:
				if tt.wantLost {
					t.Error("the wall was not stopped")
				}
			}
			var ee *exec.ExitError
			if !errors.As(r.exitErr, &ee) {
				t.Errorf("exit %v", r.exitErr)
			}
		})
	}
}

// tierProc is a spawn of a tier, for what its status says.
type tierProc struct{ tier string }

func (p tierProc) Pid() int                 { return 1 }
func (p tierProc) Tier() string             { return p.tier }
func (p tierProc) Wait() error              { return nil }
func (p tierProc) Stop(time.Duration) error { return nil }

// TestInForceUnwalledDisk: a vat that runs without its wall can write
// wherever its user can (the host's /tmp, /var/tmp), so its data folder's
// size holds none of it. Its status still listed "disk_mib" among the
// limits in force, and no "disk" among those it runs without, while the
// status page, from the same status, said it had no limits. A walled
// vat's data folder size is in force.
func TestInForceUnwalledDisk(t *testing.T) {
	s := newTestSupervisor(t)
	want := Limits{MemoryBytes: 512 << 20, CPUs: 1, DiskBytes: 1 << 30}
	for _, tt := range []struct {
		tier     string
		diskMiB  int64
		unlimits []string
	}{
		{tier: "", diskMiB: 0, unlimits: []string{limCPU, limDisk, limMemory, limTasks}},
		{tier: "walled", diskMiB: 1024, unlimits: []string{limCPU, limMemory}},
	} {
		f, why := s.inForce(tierProc{tt.tier}, want, 1<<30, "")
		var got []string
		for k := range why {
			got = append(got, k)
		}
		slices.Sort(got)
		if f.DiskMiB != tt.diskMiB || !slices.Equal(got, tt.unlimits) {
			t.Errorf("tier %q: disk_mib %d, unlimited %v (%v); want %d, %v", tt.tier, f.DiskMiB, got, why, tt.diskMiB, tt.unlimits)
		}
		if tt.tier == "" && why[limDisk] != "it runs without its wall" {
			t.Errorf("tier %q: unlimited disk = %q; want it to say it runs without its wall", tt.tier, why[limDisk])
		}
	}
}
