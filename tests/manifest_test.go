//go:build linux

package tests

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// shellApp is a vat in sh, as examples/shell-script is: perl holds the
// socket and runs the script again for each connection, where handle (sh
// that sets body, with $path the request's path) makes the answer.
func shellApp(handle string) string {
	return `#!/bin/sh
set -eu
if [ "${1:-}" = handle ]; then
	read -r method path _
	cr=$(printf '\r')
	while read -r line; do [ "$line" = "$cr" ] || [ -z "$line" ] && break; done
` + handle + `
	printf 'HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n' $((${#body} + 1)) "$body"
	exit 0
fi
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
exec perl -MIO::Socket::UNIX -e '
	my $s = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Local => $ENV{TOYBOX_LISTEN}, Listen => 16) or die "$!\n";
	$SIG{CHLD} = "IGNORE";
	while (1) { my $c = $s->accept or next; if (fork == 0) { open(STDIN, "<&", $c); open(STDOUT, ">&", $c); exec($ARGV[0], "handle") } close $c; }' "$self"
`
}

// envApp answers with its declared env value and the contents of the file
// the owner chose (sandbox.files.read), and tries a file beside it that was
// not chosen.
var envApp = shellApp(`	conf=$(cat "$CONFIG_FILE" 2>&1 || true)
	other=$(cat "$(dirname "$CONFIG_FILE")/secret.txt" 2>/dev/null || echo "no secret")
	body="greeting=$GREETING conf=$conf other=$other"`)

// TestManifestEnvAndFiles: a bundle's declared env gets the owner's values,
// the file the owner chose is readable and its neighbour is not; an upgrade
// without env keeps the values; an undeclared key is refused.
func TestManifestEnvAndFiles(t *testing.T) {
	s := newStack(t, stackOpts{})
	dir, err := os.MkdirTemp("", "tbx-files-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "conf.txt")
	if err := os.WriteFile(conf, []byte("colour=blue"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("the secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	const readsConf = `{"command":["./app.sh"],"env":["GREETING","CONFIG_FILE"],"sandbox":{"files":{"read":["CONFIG_FILE"]}}}`
	bundleWith := func(version, manifest string) string {
		p := filepath.Join(t.TempDir(), "bundle-"+version+".tar")
		b := mkTar(t,
			tarEntry{name: "manifest.json", body: manifest},
			tarEntry{name: "app.sh", body: envApp + "# " + version + "\n", mode: 0o755})
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bundle := func(version string) string { return bundleWith(version, readsConf) }
	env := fmt.Sprintf(`{"GREETING":"hola","CONFIG_FILE":%q}`, conf)
	st := s.mustInstall("envy", bundle("v1"), q("env", env))
	if got := fmt.Sprint(st["env"]); got != "[CONFIG_FILE GREETING]" {
		t.Errorf("status env = %s; want the keys (never the values)", got)
	}
	want := "greeting=hola conf=colour=blue other=no secret"
	s.mustGet("/envy/", want)
	// An upgrade without env keeps the owner's values.
	s.mustInstall("envy", bundle("v2"), "")
	s.mustGet("/envy/", want)
	code, body := s.install("envy", bundle("v3"), q("env", `{"SURPRISE":"x"}`))
	if code != http.StatusBadRequest || !strings.Contains(body, "SURPRISE") {
		t.Errorf("undeclared env = %d %s; want 400 naming the key", code, body)
	}
	code, body = s.install("envy", bundle("v4"), q("env", `{"CONFIG_FILE":"relative/path"}`))
	if code != http.StatusBadRequest || !strings.Contains(body, "absolute") {
		t.Errorf("relative file = %d %s; want 400", code, body)
	}
	s.mustGet("/envy/", want)
	// An upgrade that would write what the owner chose to be read (or bind
	// what was text) carries nothing over: the owner confirms by sending
	// env again.
	writesConf := strings.Replace(readsConf, `"read"`, `"write"`, 1)
	code, body = s.install("envy", bundleWith("v5", writesConf), "")
	if code != http.StatusBadRequest || !strings.Contains(body, "CONFIG_FILE: the old version reads it") || !strings.Contains(body, "send env again") {
		t.Errorf("upgrade from read to write without env = %d %s; want 400 naming the key and what changed", code, body)
	}
	s.mustGet("/envy/", want)
	s.mustInstall("envy", bundleWith("v5", writesConf), q("env", env))
	s.mustGet("/envy/", want)
}

// forwardHandle (a format: the two ports) answers /tcp with what a plain TCP connection to 127.0.0.1:%[1]s
// (a forwarded port, no proxy) gets back for "ping", and /http with what an
// origin-form HTTP request to 127.0.0.1:%[2]s gets: a program that knows
// nothing of proxies, reaching the loopback services its manifest lists.
const forwardHandle = `	case "$path" in
	*/tcp) body=$(perl -MIO::Socket::INET -e '$c = IO::Socket::INET->new("127.0.0.1:%[1]s") or die "connect: $!\n"; print $c "ping\n"; $l = <$c>; print $l' 2>&1 || true) ;;
	*/http) body=$(perl -MIO::Socket::INET -e '$c = IO::Socket::INET->new("127.0.0.1:%[2]s") or die "connect: $!\n"; print $c "GET / HTTP/1.1\r\nHost: 127.0.0.1:%[2]s\r\nConnection: close\r\n\r\n"; local $/; $r = <$c>; print $r' 2>&1 || true) ;;
	*) body=unknown ;;
	esac
	body=$(printf '%%s' "$body" | tr -d '\r' | tail -n 1)`

// TestManifestLoopbackForwards: loopback services a manifest lists, which
// the vat's own compose file publishes on 127.0.0.1, are reached from inside
// the wall at their own address (toybox-entry forwards the ports through the
// vat's Handle), through `toybox serve` as an operator runs it: a plain TCP
// port, and a host listed with http:// (its forward carries origin-form
// HTTP). A port the manifest lists but the compose file does not publish is
// dropped, with the reason in the status, and not forwarded.
func TestManifestLoopbackForwards(t *testing.T) {
	s := newStack(t, stackOpts{handle: "local"})
	echo, web, unlisted := echoServer(t, "echo: "), webServer(t), echoServer(t, "unlisted: ")
	manifest := fmt.Sprintf(`{"command":["./app.sh"],"network":{"hosts":["127.0.0.1:%s","http://127.0.0.1:%s","127.0.0.1:%s"]}}`, echo, web, unlisted)
	compose := fmt.Sprintf("services:\n  db:\n    image: example/db\n    ports:\n      - \"127.0.0.1:%s:5432\"\n      - \"127.0.0.1:%s:80\"\n", echo, web)
	p := filepath.Join(t.TempDir(), "bundle.tar")
	b := mkTar(t,
		tarEntry{name: "manifest.json", body: manifest},
		tarEntry{name: "compose.yaml", body: compose},
		tarEntry{name: "app.sh", body: shellApp(fmt.Sprintf(forwardHandle, echo, web)), mode: 0o755})
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	st := s.mustInstall("fwd", p, "")
	if st["status"] != "walled" {
		t.Fatalf("status = %v; want walled", st)
	}
	if d := fmt.Sprint(st["dropped"]); !strings.Contains(d, unlisted) || strings.Contains(d, echo) || strings.Contains(d, web) {
		t.Errorf("dropped = %s; want only port %s (its compose file does not publish it)", d, unlisted)
	}
	s.mustGet("/fwd/tcp", "echo: ping")
	s.mustGet("/fwd/http", "<p>hello from the local web server</p>")
}

// tmpApp answers with what writing 2 MiB to /tmp did.
var tmpApp = shellApp(`	body=$(head -c 2097152 /dev/zero 2>&1 >/tmp/fill && echo wrote || true)
	body=$(printf '%s' "$body" | tail -n 1)`)

// TestWallMaxTasks: the operator's --wall-max-tasks is each wall's task
// limit, hard, and the app's soft limit is 32 less (toybox-entry, every
// wall's first process, keeps them), for a vat with no way out and for one
// with a grant. 64 or more, and a number, or serve refuses to start.
func TestWallMaxTasks(t *testing.T) {
	for _, bad := range []string{"63", "0", "x"} {
		out, err := exec.Command(filepath.Join(bins, "toybox"), "serve", "--state", t.TempDir(), "--switchboard", "/nonexistent", "--wall-max-tasks", bad).CombinedOutput()
		if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "wall-max-tasks") {
			t.Errorf("--wall-max-tasks %s: %v %q; want exit 2 naming the flag", bad, err, out)
		}
	}
	s := newStack(t, stackOpts{extra: []string{"--wall-max-tasks", "100"}})
	p := filepath.Join(t.TempDir(), "tasks.sh")
	if err := os.WriteFile(p, []byte(shellApp(`	body=$(grep 'Max processes' /proc/self/limits)`)), 0o755); err != nil {
		t.Fatal(err)
	}
	s.mustInstall("tasks", p, "")
	s.mustInstall("granted", p, "egress="+url.QueryEscape(`{"host":"127.0.0.1","port":9}`))
	for _, tt := range []struct{ id, want string }{
		{"tasks", `^Max processes +68 +100 +processes`},
		{"granted", `^Max processes +68 +100 +processes`},
	} {
		code, body := s.get("/" + tt.id + "/")
		if code != http.StatusOK || !regexp.MustCompile(tt.want).MatchString(body) {
			t.Errorf("%s: %d %q; want %s", tt.id, code, body, tt.want)
		}
	}
}

// TestWallTmpSize: the operator's --wall-tmp-mib is each wall's /tmp: a vat
// given 1 MiB cannot write 2.
func TestWallTmpSize(t *testing.T) {
	s := newStack(t, stackOpts{extra: []string{"--wall-tmp-mib", "1"}})
	p := filepath.Join(t.TempDir(), "tmp.sh")
	if err := os.WriteFile(p, []byte(tmpApp), 0o755); err != nil {
		t.Fatal(err)
	}
	s.mustInstall("tmpfill", p, "")
	code, body := s.get("/tmpfill/")
	if code != http.StatusOK || !strings.Contains(body, "No space left on device") {
		t.Errorf("writing 2 MiB to a 1 MiB /tmp: %d %q; want the tmpfs full", code, body)
	}
}
