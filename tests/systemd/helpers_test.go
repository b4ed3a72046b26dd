//go:build linux

package systemd

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"capnproto.org/go/capnp/v3"

	"toybox/tests/testenv"
)

// unitNames are the units in systemd/, in the order make install lists them.
var unitNames = []string{
	"switchboard.socket",
	"switchboard.service",
	"toybox.socket",
	"toybox-admin.socket",
	"toybox.service",
}

// binNames are the binaries the units run and make install installs.
var binNames = []string{"switchboard", "toybox", "toybox-entry"}

// unitBinDir is the directory the committed units name in ExecStart.
const unitBinDir = "/usr/local/bin/"

// repoRoot is the checkout this test file lives in.
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("runtime.Caller: no file")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// binaries builds ./cmd/... once per test process and returns the directory
// holding switchboard, toybox and toybox-entry. It fails t when any is missing.
func binaries(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "toybox-systemd-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildDir = dir
		// A root supervisor runs its walls as uid 65534, which must be
		// able to reach toybox-entry here.
		if err := os.Chmod(dir, 0o755); err != nil {
			buildErr = err
			return
		}
		cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/...")
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/...: %w\n%s", err, out)
			return
		}
		// toybox-entry as the Makefile builds it (static).
		cmd = exec.Command("go", append(append([]string{"build"}, testenv.EntryBuildFlags...), "-o", dir+"/", "./cmd/toybox-entry")...)
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/toybox-entry: %w\n%s", err, out)
			return
		}
		for _, b := range binNames {
			if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
				buildErr = fmt.Errorf("go build ./cmd/... made no %s binary (is cmd/%s written yet?): %w", b, b, err)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

func TestMain(m *testing.M) {
	var (
		leakMu sync.Mutex
		leaks  []string
	)
	capnp.SetClientLeakFunc(func(msg string) {
		leakMu.Lock()
		defer leakMu.Unlock()
		leaks = append(leaks, msg)
	})
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	// Leaked clients are reported when the garbage collector finds them.
	runtime.GC()
	runtime.GC()
	leakMu.Lock()
	if len(leaks) > 0 {
		fmt.Fprintf(os.Stderr, "%d capability client(s) leaked:\n%s\n", len(leaks), strings.Join(leaks, "\n"))
		code = 1
	}
	leakMu.Unlock()
	os.Exit(code)
}

// unit is a parsed unit file: section → key → every value, in order (a
// key may repeat; an empty assignment resets the list, as systemd does).
type unit map[string]map[string][]string

// parseUnit reads a unit file's [Section] Key=Value lines. It understands
// comments and sections; it does not handle line continuations, which the
// units here never use (a continuation is reported as an error).
func parseUnit(data []byte) (unit, error) {
	u := unit{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case strings.HasSuffix(line, "\\"):
			return nil, fmt.Errorf("line %d: line continuation not supported", n)
		case line[0] == '[':
			if !strings.HasSuffix(line, "]") {
				return nil, fmt.Errorf("line %d: malformed section %q", n, line)
			}
			section = line[1 : len(line)-1]
			if strings.TrimSpace(section) == "" {
				return nil, fmt.Errorf("line %d: empty section name", n)
			}
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok || section == "" {
			return nil, fmt.Errorf("line %d: not Key=Value inside a section: %q", n, line)
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if key == "" || strings.ContainsAny(key, " \t") {
			return nil, fmt.Errorf("line %d: malformed key %q", n, key)
		}
		if value == "" {
			u[section][key] = []string{}
			continue
		}
		u[section][key] = append(u[section][key], value)
	}
	return u, sc.Err()
}

// get returns the last value of section.key, or "".
func (u unit) get(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// readUnit parses systemd/<name> from the checkout.
func readUnit(t testing.TB, name string) unit {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "systemd", name))
	if err != nil {
		t.Fatal(err)
	}
	u, err := parseUnit(data)
	if err != nil {
		t.Fatalf("parsing %s: %v", name, err)
	}
	return u
}

// writeRewrittenUnits copies every unit into dir with ExecStart's
// /usr/local/bin/ replaced by binDir, and returns the paths written.
func writeRewrittenUnits(t testing.TB, dir, binDir string) []string {
	t.Helper()
	var paths []string
	for _, name := range unitNames {
		data, err := os.ReadFile(filepath.Join(repoRoot(t), "systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		data = bytes.ReplaceAll(data, []byte(unitBinDir), []byte(strings.TrimSuffix(binDir, "/")+"/"))
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}
