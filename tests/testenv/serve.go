package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// ServeTCP accepts on 127.0.0.1 until the test ends, runs handle on each
// connection and closes it after. It returns the port.
func ServeTCP(t testing.TB, handle func(net.Conn)) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); handle(c) }()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// built holds the binaries Binary built, by package, for this process.
var built struct {
	sync.Mutex
	bins map[string]*binary
}

type binary struct {
	once sync.Once
	path string
	err  error
}

// Binary builds the main package pkg (an import path) once per test
// process and returns the binary's path.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	built.Lock()
	if built.bins == nil {
		built.bins = map[string]*binary{}
	}
	b := built.bins[pkg]
	if b == nil {
		b = &binary{}
		built.bins[pkg] = b
	}
	built.Unlock()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "toybox-test-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, filepath.Base(pkg))
		if out, err := exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("building %s: %w\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}
