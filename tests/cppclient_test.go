//go:build linux

package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"toybox/tests/testenv"
)

// buildCppClient builds examples/cpp-client with its Makefile (the stock
// capnp tool on schema/ alone, libcapnp-dev, -Wall -Wextra -Werror) into a
// temporary folder and returns the binary. The build must not warn.
func buildCppClient(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"make", "capnp", "g++", "pkg-config"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Unavailable(t, tool+" is not installed (make deps installs it)")
		}
	}
	if out, err := exec.Command("pkg-config", "--exists", "--print-errors", "capnp-rpc").CombinedOutput(); err != nil {
		testenv.Unavailable(t, "libcapnp-dev is not installed (make deps installs it): "+strings.TrimSpace(string(out)))
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command("make", "--no-print-directory", "-C", filepath.Join(root, "examples", "cpp-client"), "OUT="+out)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("building examples/cpp-client: %v\n%s", err, b)
	}
	// g++ stops at a warning (-Werror); this catches the capnp tool's.
	if bytes.Contains(bytes.ToLower(b), []byte("warning")) {
		t.Errorf("building examples/cpp-client warned:\n%s", b)
	}
	return filepath.Join(out, "cpp-client")
}

// TestCppClient runs the C++ example client (Debian's libcapnp-dev) against a
// real switchboard: describe, constrain, check, a connect whose socket comes
// back by the documented descriptor handoff, the ByteStream fallback, and
// refusals as their "egress refused:" text. Several connects go out together
// on one connection, to two servers, so a descriptor paired with the wrong
// answer would reach the wrong server.
func TestCppClient(t *testing.T) {
	client := buildCppClient(t)
	dir := t.TempDir()
	sb := &stack{t: t, sbPublic: filepath.Join(dir, "sb-public.sock"), sbLocal: filepath.Join(dir, "sb-local.sock")}
	sb.startSwitchboard()
	t.Cleanup(func() {
		sb.stopSwitchboard()
		if t.Failed() {
			t.Logf("switchboard log:\n%s", tail(sb.sbLog))
		}
	})
	portA, portB := echoServer(t, "A: "), echoServer(t, "B: ")
	a, b := "127.0.0.1:"+portA, "127.0.0.1:"+portB
	tcpLocal := "scheme=tcp,host=127.0.0.1"
	onlyA := tcpLocal + ",port=" + portA

	run := func(t *testing.T, wantCode int, args ...string) (string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, client, append([]string{sb.sbLocal}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("cpp-client %s: %v", strings.Join(args, " "), err)
		}
		if code != wantCode {
			t.Fatalf("cpp-client %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, wantCode, stdout.String(), stderr.String())
		}
		return stdout.String(), stderr.String()
	}

	t.Run("describe", func(t *testing.T) {
		if out, _ := run(t, 0, "describe"); out != "labels: network=local\n" {
			t.Errorf("root handle: %q", out)
		}
		want := fmt.Sprintf("labels: network=local scheme=tcp host=127.0.0.1 port=%s\n", portA)
		if out, _ := run(t, 0, "-c", tcpLocal, "-c", "port="+portA, "describe"); out != want {
			t.Errorf("constrained twice: %q, want %q", out, want)
		}
		if _, errOut := run(t, 1, "-c", onlyA, "-c", "port="+portB, "describe"); !strings.Contains(errOut, "labels conflict") {
			t.Errorf("a conflicting constrain: %q", errOut)
		}
	})

	t.Run("check", func(t *testing.T) {
		out, _ := run(t, 0, "-c", onlyA, "check", a)
		if !strings.HasPrefix(out, "allowed: ") || !strings.Contains(out, "\naddresses: 127.0.0.1\nvetted: 127.0.0.1\n") {
			t.Errorf("check: %q", out)
		}
		_, errOut := run(t, 3, "-c", onlyA, "check", b)
		if want := "egress refused: port " + portB + " not granted\n"; !strings.HasPrefix(errOut, want) {
			t.Errorf("check refused: %q, want it to start %q", errOut, want)
		}
	})

	t.Run("connect with the descriptor", func(t *testing.T) {
		out, _ := run(t, 0, "-c", tcpLocal, "connect", a, "one\n", b, "two\n", a, "three\n", b, "four\n")
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		fdLine := regexp.MustCompile(`^fd: descriptor (\d+), a socket connected to 127\.0\.0\.1:(\d+)$`)
		var seqs []string
		var got []string
		for i := 0; i < len(lines); i++ {
			if m := fdLine.FindStringSubmatch(lines[i]); m != nil {
				seqs = append(seqs, m[1])
				got = append(got, "port "+m[2])
				continue
			}
			if strings.HasPrefix(lines[i], "got: ") {
				got = append(got, lines[i])
			}
		}
		want := []string{"port " + portA, "got: A: one", "port " + portB, "got: B: two", "port " + portA, "got: A: three", "port " + portB, "got: B: four"}
		if !slices.Equal(got, want) {
			t.Errorf("connects:\n%s\nwant, in order: %q", out, want)
		}
		// Numbered 1..4 on this connection, each once, in whatever order
		// the answers came.
		slices.Sort(seqs)
		if !slices.Equal(seqs, []string{"1", "2", "3", "4"}) {
			t.Errorf("descriptor numbers %v, want 1 to 4 once each:\n%s", seqs, out)
		}
		_, errOut := run(t, 3, "-c", onlyA, "connect", b, "five\n")
		if want := "egress refused: port " + portB + " not granted"; !strings.HasPrefix(errOut, want) {
			t.Errorf("connect refused: %q, want it to start %q", errOut, want)
		}
	})

	t.Run("connect through the ByteStream", func(t *testing.T) {
		out, _ := run(t, 0, "-c", tcpLocal, "connect", "--stream", a, "six\n", b, "seven\n")
		want := "stream: relayed through the switchboard\ngot: A: six\n\nstream: relayed through the switchboard\ngot: B: seven\n\n"
		if out != want {
			t.Errorf("stream connects: %q, want %q", out, want)
		}
		_, errOut := run(t, 3, "-c", onlyA, "connect", "--stream", b, "eight\n")
		if want := "egress refused: port " + portB + " not granted"; !strings.HasPrefix(errOut, want) {
			t.Errorf("stream connect refused: %q, want it to start %q", errOut, want)
		}
	})

	// The switchboard decided every one of them (its log is written off the
	// call's path, so the last record may come a moment after the answer).
	decisions := func() (allowed, refused int) {
		for _, line := range strings.Split(sb.sbLog.String(), "\n") {
			switch {
			case !strings.Contains(line, `"op":"connect"`):
			case strings.Contains(line, `"allow":true`):
				allowed++
			default:
				refused++
			}
		}
		return allowed, refused
	}
	waitFor(t, "the connect decisions in the switchboard's log", 10*time.Second, func() bool {
		a, r := decisions()
		return a+r >= 8
	})
	if a, r := decisions(); a != 6 || r != 2 {
		t.Errorf("connect decisions logged: %d allowed, %d refused; want 6 and 2", a, r)
	}
}
