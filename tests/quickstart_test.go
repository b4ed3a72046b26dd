//go:build linux

package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// quickstart returns the code blocks of the README's Quickstart section.
func quickstart(t *testing.T) [][]string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "## Quickstart")
	if i < 0 {
		t.Fatal("README.md has no Quickstart section")
	}
	text = text[i+len("## Quickstart"):]
	if j := strings.Index(text, "\n## "); j >= 0 {
		text = text[:j]
	}
	var blocks [][]string
	var cur []string
	in := false
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "```") && !in:
			in, cur = true, nil
		case strings.HasPrefix(line, "```") && in:
			in = false
			blocks = append(blocks, cur)
		case in && strings.TrimSpace(line) != "":
			cur = append(cur, line)
		}
	}
	if len(blocks) != 3 {
		t.Fatalf("Quickstart has %d code blocks; want 3 (make dev, the local server, the session)", len(blocks))
	}
	return blocks
}

// matches reports whether out matches the README's expected text, where
// "..." stands for anything.
func matches(out, want string) bool {
	parts := strings.Split(want, "...")
	if !strings.HasPrefix(out, parts[0]) {
		return false
	}
	out = out[len(parts[0]):]
	for _, p := range parts[1:] {
		k := strings.Index(out, p)
		if k < 0 {
			return false
		}
		out = out[k+len(p):]
	}
	return len(parts) > 1 || out == ""
}

// TestQuickstart runs the README's quickstart session, line by line, against
// a real switchboard and supervisor started as `make dev DEV_HANDLE=local`
// starts them (with free ports and temporary paths).
func TestQuickstart(t *testing.T) {
	blocks := quickstart(t)
	if got := strings.TrimSpace(blocks[0][0]); got != "make dev DEV_HANDLE=local" {
		t.Fatalf("first block = %q; the test starts the stack as make dev DEV_HANDLE=local does", got)
	}
	s := newStack(t, stackOpts{handle: "local"})
	site := t.TempDir()
	sitePort := freePort(t)
	_, port, _ := strings.Cut(s.http, ":")
	sub := strings.NewReplacer(
		".localhost:8787", ".localhost:"+port, // a vat's own origin: <vat>.localhost
		"localhost:8787", s.http,
		"127.0.0.1:8000", "127.0.0.1:"+sitePort,
		`"port":8000`, `"port":`+sitePort,
		"admin.sock", s.admin,
		"@bin/examples/", "@"+bins+"/examples/",
		"/tmp/site", site,
	)
	// Block 2: the local web server (the last line runs in the foreground
	// in the README; here in the background).
	srv := blocks[1]
	for _, line := range srv[:len(srv)-1] {
		if out, err := exec.Command("bash", "-c", sub.Replace(line)).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
	}
	httpd := exec.Command("bash", "-c", "exec "+sub.Replace(srv[len(srv)-1]))
	httpd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := httpd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = httpd.Process.Kill(); _ = httpd.Wait() })
	time.Sleep(200 * time.Millisecond)

	// Block 3: the session.
	for _, line := range blocks[2] {
		cmdText, want, _ := strings.Cut(line, "#")
		cmdText, want = strings.TrimSpace(cmdText), strings.TrimSpace(want)
		cmd := sub.Replace(cmdText)
		out, err := exec.Command("bash", "-c", strings.Replace(cmd, "curl ", "curl -sS ", 1)).CombinedOutput()
		got := strings.TrimSpace(string(out))
		if err != nil {
			t.Fatalf("%s: %v\n%s", cmdText, err, got)
		}
		switch {
		case strings.Contains(cmdText, "-X PUT"):
			if !strings.Contains(got, `"status": "walled"`) {
				t.Errorf("%s\n= %s\nwant an install that runs walled", cmdText, got)
			}
		case want != "":
			if !matches(got, want) {
				t.Errorf("%s\n= %q\nwant %q (as the README says)", cmdText, got, want)
			}
		}
	}
}

func TestMatches(t *testing.T) {
	tests := []struct {
		out, want string
		ok        bool
	}{
		{"v1 count 1", "v1 count 1", true},
		{"v1 count 12", "v1 count 1", false},
		{"got: egress refused: egress to example.org not granted", "got: egress refused: ...example.org... not granted", true},
		{"got: egress refused: nope", "got: egress refused: ...example.org...", false},
	}
	for _, tt := range tests {
		if got := matches(tt.out, tt.want); got != tt.ok {
			t.Errorf("matches(%q, %q) = %v; want %v", tt.out, tt.want, got, tt.ok)
		}
	}
}
