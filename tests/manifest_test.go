package tests

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// envApp answers with its declared env value and the contents of the file
// the owner chose (sandbox.files.read), and tries a file beside it that was
// not chosen. Like examples/shell-script, perl holds the socket and sh
// answers.
const envApp = `#!/bin/sh
set -eu
if [ "${1:-}" = handle ]; then
	read -r method path _
	cr=$(printf '\r')
	while read -r line; do [ "$line" = "$cr" ] || [ -z "$line" ] && break; done
	conf=$(cat "$CONFIG_FILE" 2>&1 || true)
	other=$(cat "$(dirname "$CONFIG_FILE")/secret.txt" 2>/dev/null || echo "no secret")
	body="greeting=$GREETING conf=$conf other=$other"
	printf 'HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n' $((${#body} + 1)) "$body"
	exit 0
fi
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
exec perl -MIO::Socket::UNIX -e '
	my $s = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Local => $ENV{TOYBOX_LISTEN}, Listen => 16) or die "$!\n";
	$SIG{CHLD} = "IGNORE";
	while (1) { my $c = $s->accept or next; if (fork == 0) { open(STDIN, "<&", $c); open(STDOUT, ">&", $c); exec($ARGV[0], "handle") } close $c; }' "$self"
`

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
