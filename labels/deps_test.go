package labels

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// goList runs go list on this package with the given format, one result a
// line.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		var stderr string
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list %v: %v\n%s", args, err, stderr)
	}
	return strings.Fields(string(out))
}

// TestDeps keeps labels a leaf of pure values: the stdlib and x/net/idna
// (with the x/text packages it pulls), and no package that would let it do
// I/O, resolve names, log or read the clock.
func TestDeps(t *testing.T) {
	allowed := []struct{ prefix, why string }{
		{"golang.org/x/net/idna", "IDNA mapping of host names (UTS #46), not in the stdlib"},
		{"golang.org/x/text/", "pulled by x/net/idna for normalisation and the bidi rule"},
	}
	forbiddenDeps := map[string]string{
		"net":         "labels judges text; resolving names is the switchboard's job",
		"net/http":    "labels does no I/O",
		"os/exec":     "labels does no I/O",
		"log":         "policy is pure: reasons go in the Decision, the caller logs",
		"log/slog":    "policy is pure: reasons go in the Decision, the caller logs",
		"testing":     "test code must not leak into the package",
		"runtime/cgo": "labels is pure Go",
	}
	for _, line := range goList(t, "-deps", "-f", "{{.ImportPath}}:{{.Standard}}", ".") {
		path, std, _ := strings.Cut(line, ":")
		if why, bad := forbiddenDeps[path]; bad {
			t.Errorf("labels depends on %s: %s", path, why)
			continue
		}
		if std == "true" || path == "toybox/labels" {
			continue
		}
		ok := false
		for _, a := range allowed {
			if path == a.prefix || strings.HasPrefix(path, a.prefix) {
				ok = true
				break
			}
		}
		if !ok {
			t.Errorf("labels depends on %s: only the stdlib and x/net/idna (+ x/text) are allowed, so every service can import labels without pulling anything else", path)
		}
	}

	// The stdlib pulls os, time and syscall in underneath fmt; labels
	// itself must not use them.
	forbiddenImports := map[string]string{
		"os":          "no I/O: decisions are pure values",
		"io/fs":       "no I/O: decisions are pure values",
		"syscall":     "no I/O: decisions are pure values",
		"time":        "no clock: the same inputs always give the same decision",
		"math/rand":   "no randomness: the same inputs always give the same decision",
		"crypto/rand": "no randomness: the same inputs always give the same decision",
		"unsafe":      "labels is memory-safe Go",
	}
	for _, path := range goList(t, "-f", `{{join .Imports "\n"}}`, ".") {
		if why, bad := forbiddenImports[path]; bad {
			t.Errorf("labels imports %s: %s", path, why)
		}
	}
}
