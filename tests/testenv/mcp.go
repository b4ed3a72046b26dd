package testenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The MCP test fixtures, pinned: the official conformance suite (npm), the
// Node it needs (the node npm package: the machine's own Node is older than
// the suite's >= 22), and the Go SDK's conformance everything-server (the
// Go module proxy): v1.7.0 serves both eras, v1.6.1 only the legacy one.
const (
	ConformanceVersion = "0.2.0-alpha.12"
	NodeVersion        = "24.21.0"
	EverythingModule   = "github.com/modelcontextprotocol/go-sdk/conformance/everything-server"
	EverythingDual     = "v1.7.0"
	EverythingLegacy   = "v1.6.1"
)

// CacheDir is where fixtures installed at test time are kept between runs:
// $TOYBOX_TEST_CACHE, else the user's cache folder's toybox-test.
func CacheDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("TOYBOX_TEST_CACHE")
	if dir == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			t.Fatalf("no cache folder for the test fixtures: %v (set TOYBOX_TEST_CACHE)", err)
		}
		dir = filepath.Join(c, "toybox-test")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// installOnce runs install into dir unless done names a file already there,
// holding a lock so that test packages running at once install it once.
func installOnce(t testing.TB, dir, done string, install func() error) {
	t.Helper()
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	if _, err := os.Stat(done); err == nil {
		return
	}
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := install(); err != nil {
		_ = os.RemoveAll(dir)
		Unavailable(t, err.Error())
	}
	if _, err := os.Stat(done); err != nil {
		Unavailable(t, fmt.Sprintf("the install left no %s: %v", done, err))
	}
}

// EverythingServer returns the path of the Go SDK's conformance
// everything-server at version, installed with go install through the Go
// module proxy into the cache folder.
func EverythingServer(t testing.TB, version string) string {
	t.Helper()
	dir := filepath.Join(CacheDir(t), "everything-server@"+version)
	bin := filepath.Join(dir, "everything-server")
	installOnce(t, dir, bin, func() error {
		cmd := exec.Command("go", "install", EverythingModule+"@"+version)
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "CGO_ENABLED=0", "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go install %s@%s: %w\n%s", EverythingModule, version, err, out)
		}
		return nil
	})
	return bin
}

// Conformance returns the Node binary and the conformance suite's entry,
// installed from the npm registry into the cache folder.
func Conformance(t testing.TB) (node, suite string) {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		Unavailable(t, "npm is not installed (the nodejs package): it installs the MCP conformance suite")
	}
	dir := filepath.Join(CacheDir(t), "conformance@"+ConformanceVersion+"-node@"+NodeVersion)
	node = filepath.Join(dir, "node_modules", "node", "bin", "node")
	suite = filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
	installOnce(t, dir, suite, func() error {
		cmd := exec.Command(npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", dir,
			"node@"+NodeVersion, "@modelcontextprotocol/conformance@"+ConformanceVersion)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("npm install of the conformance suite: %w\n%s", err, out)
		}
		out, err := exec.Command(node, "--version").Output()
		if err != nil || strings.TrimSpace(string(out)) != "v"+NodeVersion {
			return fmt.Errorf("the node package gave no node %s at %s: %q, %w", NodeVersion, node, out, err)
		}
		return nil
	})
	return node, suite
}

// Suite is one run of the conformance suite's server checks.
type Suite struct {
	// Output is what the suite printed.
	Output string
	// Checks maps "scenario/check-id#n" (n counts a check id's repeats in
	// its scenario) to its status: SUCCESS, FAILURE, WARNING, SKIPPED…
	Checks map[string]string
}

// Passed lists the checks that passed, sorted: SUCCESS, or WARNING, which
// the suite counts as passed too.
func (s Suite) Passed() []string {
	var out []string
	for k, v := range s.Checks {
		if v == "SUCCESS" || v == "WARNING" {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// Lost compares through with s, the same suite run against the reference:
// the checks s passed that through did not (lost), and those s passed
// cleanly that through passed only with a warning (warned).
func (s Suite) Lost(through Suite) (lost, warned []string) {
	for _, k := range s.Passed() {
		switch got := through.Checks[k]; {
		case got != "SUCCESS" && got != "WARNING":
			lost = append(lost, fmt.Sprintf("%s (%s)", k, got))
		case got == "WARNING" && s.Checks[k] == "SUCCESS":
			warned = append(warned, k)
		}
	}
	return lost, warned
}

// Summary is the suite's own summary, from its output.
func (s Suite) Summary() string {
	if i := strings.Index(s.Output, "=== SUMMARY ==="); i >= 0 {
		return s.Output[i:]
	}
	return s.Output
}

var stampRe = regexp.MustCompile(`-\d{4}-\d{2}-\d{2}T[0-9-]+Z$`)

// RunConformance runs the suite's server scenarios of requirements (a spec
// revision, such as 2025-11-25) against url, and reads every check.
func RunConformance(t testing.TB, url, requirements string) Suite {
	t.Helper()
	node, suite := Conformance(t)
	out := t.TempDir()
	cmd := exec.Command(node, suite, "server", "--url", url, "--requirements", requirements, "-o", out)
	b, err := cmd.CombinedOutput()
	if _, ok := errors.AsType[*exec.ExitError](err); err != nil && !ok {
		t.Fatalf("running the conformance suite: %v", err)
	}
	res := Suite{Output: string(b), Checks: map[string]string{}}
	dirs, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		scenario := stampRe.ReplaceAllString(strings.TrimPrefix(d.Name(), "server-"), "")
		raw, err := os.ReadFile(filepath.Join(out, d.Name(), "checks.json"))
		if err != nil {
			continue
		}
		var checks []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		}
		if err := json.Unmarshal(raw, &checks); err != nil {
			t.Fatalf("reading %s's checks: %v", d.Name(), err)
		}
		seen := map[string]int{}
		for _, c := range checks {
			seen[c.ID]++
			res.Checks[fmt.Sprintf("%s/%s#%d", scenario, c.ID, seen[c.ID])] = c.Status
		}
	}
	if len(res.Checks) == 0 {
		t.Fatalf("the conformance suite ran no check:\n%s", b)
	}
	return res
}

// StartEverything runs the everything-server at bin in its -http mode on a
// free loopback port, with args (v1.7.0 takes -stateless=false), until the
// test ends, and returns its endpoint, http://localhost:PORT/mcp, once it
// answers.
func StartEverything(t testing.TB, bin string, args ...string) string {
	t.Helper()
	for range 5 {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		_ = l.Close()
		cmd := exec.Command(bin, append([]string{"-http=localhost:" + port}, args...)...)
		var out Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if c, err := net.Dial("tcp4", "127.0.0.1:"+port); err == nil {
				_ = c.Close()
				t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
				return "http://localhost:" + port + "/mcp"
			}
			select {
			case <-exited:
			case <-time.After(10 * time.Millisecond):
				continue
			}
			break
		}
		_ = cmd.Process.Kill()
		<-exited
		t.Logf("everything-server on port %s did not come up: %s", port, out.String())
	}
	t.Fatal("the everything-server did not come up")
	return ""
}
