package mcptest

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// The Go SDK's conformance server: v1.7.0 speaks both eras, v1.6.1 only
// the 2025 revisions.
const (
	EverythingModule = "github.com/modelcontextprotocol/go-sdk/conformance/everything-server"
	DualVersion      = "v1.7.0"
	LegacyVersion    = "v1.6.1"
)

var (
	buildMu sync.Mutex
	built   = map[string]string{}
)

// EverythingServer returns the path of the conformance everything-server
// at version, built with go install (through the Go module proxy) into a
// folder of the test machine's temporary directory, once per machine.
func EverythingServer(t testing.TB, version string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[version]; ok {
		return p
	}
	dir := filepath.Join(os.TempDir(), "toybox-mcp-fixtures", version)
	final := filepath.Join(dir, "everything-server")
	if _, err := os.Stat(final); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		tmp, err := os.MkdirTemp(dir, "build-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		cmd := exec.Command("go", "install", EverythingModule+"@"+version)
		cmd.Dir = tmp
		cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go install %s@%s: %v\n%s", EverythingModule, version, err, out)
		}
		// A rename, so that a test beside this one never runs half a file.
		if err := os.Rename(filepath.Join(tmp, "everything-server"), final); err != nil {
			t.Fatal(err)
		}
	}
	built[version] = final
	return final
}
