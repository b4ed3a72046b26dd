//go:build linux

package tests

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"toybox/tests/testenv"
	"toybox/vat/words"
)

// waitWord waits until vat id's status word is want, and returns its
// status.
func (s *stack) waitWord(id, want string) map[string]any {
	s.t.Helper()
	var st map[string]any
	testenv.WaitFor(s.t, 30*time.Second, func() error {
		if st = s.status(id); st["status"] == want {
			return nil
		}
		_, logs := s.adminDo("GET", "/"+id+"/logs", nil)
		return fmt.Errorf("status of %s = %v; want %q\nits output:\n%s", id, st, want, logs)
	})
	return st
}

// restart stops toybox and starts it again with more flags and env.
func (s *stack) restart(extra, env []string) {
	s.t.Helper()
	s.stopToybox()
	s.extra = append(s.extra, extra...)
	s.env = append(s.env, env...)
	s.startToybox()
}

// wantWords checks a status's word in both languages.
func wantWords(t *testing.T, st map[string]any, w words.Word, detail string) {
	t.Helper()
	if st["status"] != w.With("en", detail) || st["status_es"] != w.With("es", detail) {
		t.Errorf("status %q / %q; want %q / %q", st["status"], st["status_es"], w.With("en", detail), w.With("es", detail))
	}
}

// hostTree makes a folder outside every state dir that the vats' uids may
// traverse, removed at the end.
func hostTree(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "tbx-host-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// writeTable writes the operator's table, root's and 0644, in a folder of
// its own.
func writeTable(t *testing.T, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "walls-table.json")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func digestOf(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// otherSnoop is snoop with one byte more: the same program under another
// digest, so approving snoop's code approves not this one.
func otherSnoop(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(example(t, "snoop"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "snoop-other")
	if err := os.WriteFile(p, append(b, '\n'), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustWrite(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// TestNoBubblewrap: a computer where toybox finds no bubblewrap (--bwrap
// names a file that is not there). With walls on, a vat stays off and
// says how to fix it; with the per-host default off it runs unwalled, under
// no_new_privs, and its word says whether the Docker socket is reachable
// from it.
func TestNoBubblewrap(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "bwrap")
	s := newStack(t, stackOpts{extra: []string{"--bwrap", missing}})
	if code, body := s.install("alice", example(t, "snoop"), ""); code != http.StatusServiceUnavailable {
		t.Fatalf("PUT /alice = %d %s; want 503 (installed, off)", code, body)
	}
	st := s.waitWord("alice", words.OffNoBwrap.String())
	wantWords(t, st, words.OffNoBwrap, "")
	if e := fmt.Sprint(st["last_error"]); !strings.Contains(e, "apt-get install bubblewrap") {
		t.Errorf("last_error %q; want the fix (the package bubblewrap)", e)
	}
	if code, _ := s.get("/alice/env"); code == http.StatusOK {
		t.Errorf("GET /alice/env = 200; the vat runs, with no wall and walls on")
	}
	out, err := exec.Command(filepath.Join(bins, "toybox"), "doctor", "--bwrap", missing, "--entry", filepath.Join(bins, "toybox-entry")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "FAIL bubblewrap installed") || !strings.Contains(string(out), "fix: apt-get install bubblewrap") {
		t.Errorf("toybox doctor --bwrap %s = %v\n%s\nwant a failure naming the package", missing, err, out)
	}

	// The per-host default off: unwalled, under no_new_privs. The Docker
	// socket here is root's alone (0600): not reachable from the vat.
	sock := filepath.Join(s.dir, "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Chmod(sock, 0o600); err != nil {
		t.Fatal(err)
	}
	s.restart([]string{"--docker-socket", sock}, []string{"TOYBOX_WALLS_DEFAULT=off"})
	st = s.waitWord("alice", words.NotWalledNoBwrap.String())
	wantWords(t, st, words.NotWalledNoBwrap, "")
	if line := fmt.Sprint(st["wall_line"]); line != words.LineUnwalled.In("en") || st["wall_line_es"] != words.LineUnwalled.In("es") {
		t.Errorf("wall_line %q / %q; want the unwalled line alone", line, st["wall_line_es"])
	}
	if _, body := s.get("/alice/read?path=/proc/self/status"); !strings.Contains(body, "NoNewPrivs:\t1") {
		t.Errorf("the unwalled vat's /proc/self/status:\n%s\nwant NoNewPrivs: 1", body)
	}
	if _, body := s.get("/alice/dial?addr=" + sock); !strings.HasPrefix(body, "denied") {
		t.Errorf("dial the 0600 socket = %q; want denied (a control: the word says not reachable)", body)
	}

	// A Docker socket anyone may connect to: reachable, and the word says so.
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	s.restart(nil, nil)
	st = s.waitWord("alice", words.NotWalledNoBwrapDocker.String())
	wantWords(t, st, words.NotWalledNoBwrapDocker, "")
	if line := fmt.Sprint(st["wall_line"]); !strings.Contains(line, words.LineDocker.In("en")) {
		t.Errorf("wall_line %q; want the Docker line", line)
	}
	if _, body := s.get("/alice/dial?addr=" + sock); body != "ok: connected" {
		t.Errorf("dial the 0666 socket = %q; want connected (the word is true)", body)
	}
}

// TestUserNamespaceRefused: bubblewrap installed but unable to start a
// sandbox, for real: toybox runs in a user and network namespace of its
// own whose user.max_user_namespaces is 0, so the kernel refuses every
// wall's user namespace. The vat stays off (never a weaker tier), and
// its reason and doctor name the sysctl and its fix.
func TestUserNamespaceRefused(t *testing.T) {
	testenv.RequireBwrap(t)
	testenv.RequireRoot(t)
	dir, err := os.MkdirTemp("", "tbx-userns-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unmountBelow(dir); _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	inNS := func(args ...string) *exec.Cmd {
		cmd := exec.Command("sh", append([]string{"-c", `echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" "$@"`, filepath.Join(bins, "toybox")}, args...)...)
		// Every id maps to itself: toybox is root in there, the vats'
		// uids are theirs, and only the sysctl differs.
		ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1 << 31}}
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
			UidMappings: ids, GidMappings: ids, GidMappingsEnableSetgroups: true,
			Pdeathsig: syscall.SIGKILL,
		}
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		return cmd
	}
	out, err := inNS("doctor", "--entry", filepath.Join(bins, "toybox-entry")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "FAIL user.max_user_namespaces: = 0") || !strings.Contains(string(out), "fix: sysctl -w user.max_user_namespaces=15000") {
		t.Errorf("toybox doctor with user.max_user_namespaces=0 = %v\n%s\nwant the sysctl and its fix", err, out)
	}
	s := &stack{t: t, dir: dir, admin: filepath.Join(dir, "admin.sock"), tbLog: &syncBuffer{}}
	s.tb = inNS("serve", "--state", filepath.Join(dir, "state"), "--admin", s.admin, "--http", "unix:"+filepath.Join(dir, "http.sock"),
		"--entry", filepath.Join(bins, "toybox-entry"), "--wall-disk-mib", "0", "--stop-grace", "2s")
	s.tb.Stdout, s.tb.Stderr = s.tbLog, s.tbLog
	if err := s.tb.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.stopToybox()
		if t.Failed() {
			t.Logf("toybox log:\n%s", tail(s.tbLog))
		}
	})
	waitFor(t, "toybox's admin socket", 15*time.Second, func() bool {
		code, _ := s.adminDo("GET", "/", nil)
		return code == http.StatusOK
	})
	// 503: installed, and off.
	if code, body := s.install("alice", example(t, "snoop"), ""); code != http.StatusServiceUnavailable {
		t.Fatalf("PUT /alice = %d %s; want 503 (installed, off)", code, body)
	}
	st := s.waitWord("alice", words.OffWall.String())
	wantWords(t, st, words.OffWall, "")
	e := fmt.Sprint(st["last_error"])
	for _, want := range []string{"user namespaces are switched off (user.max_user_namespaces=0)", "fix: sysctl -w user.max_user_namespaces=15000"} {
		if !strings.Contains(e, want) {
			t.Errorf("last_error %q; want it to say %q", e, want)
		}
	}
}

// TestApprovedCommand: code the operator's table approves runs unwalled,
// and says so; other code stays walled. A vat cannot approve itself: not
// by writing the table from inside its wall, nor unwalled as its own uid,
// nor through the admin API; and toybox reads no table that someone but
// root may write.
func TestApprovedCommand(t *testing.T) {
	snoop := example(t, "snoop")
	doc := fmt.Sprintf(`{"approved": [{"sha256": %q, "why": "a data backend"}]}`, digestOf(t, snoop))
	table := writeTable(t, doc)
	s := newStack(t, stackOpts{extra: []string{"--walls-table", table}})

	s.mustInstall("backend", snoop, "")
	st := s.waitWord("backend", words.NotWalledApproved.String())
	wantWords(t, st, words.NotWalledApproved, "")
	if line := fmt.Sprint(st["wall_line"]); line != words.LineUnwalled.In("en") {
		t.Errorf("wall_line %q; want the unwalled line", line)
	}
	if _, body := s.get("/backend/read?path=/proc/self/status"); !strings.Contains(body, "NoNewPrivs:\t1") {
		t.Errorf("the approved command's /proc/self/status:\n%s\nwant NoNewPrivs: 1", body)
	}
	if _, body := s.get("/backend/write?path=" + table); !strings.HasPrefix(body, "denied") {
		t.Errorf("the approved command, unwalled, writing the table = %q; want denied (root's, 0644)", body)
	}

	s.mustInstall("eve", otherSnoop(t), "")
	st = s.waitWord("eve", words.Walled.String())
	wantWords(t, st, words.Walled, "")
	if st["wall_line"] != words.LineNotCovered.In("en") || st["wall_line_es"] != words.LineNotCovered.In("es") {
		t.Errorf("walled vat's wall_line %q / %q; want the fixed sentence", st["wall_line"], st["wall_line_es"])
	}
	for _, path := range []string{"/eve/write?path=" + table, "/eve/read?path=" + table, "/eve/write?path=" + filepath.Join(filepath.Dir(table), "walls-table.json.new")} {
		if _, body := s.get(path); !strings.HasPrefix(body, "denied") {
			t.Errorf("GET %s from inside the wall = %q; want denied", path, body)
		}
	}
	if code, body := s.adminDo("PUT", "/eve?approved="+digestOf(t, otherSnoop(t)), strings.NewReader("")); code != http.StatusBadRequest {
		t.Errorf("PUT /eve?approved= = %d %s; want 400 (no such parameter)", code, body)
	}
	if code, body := s.adminDo("POST", "/eve/walls?walled=false", nil); code != http.StatusOK {
		t.Fatalf("POST /eve/walls?walled=false = %d %s", code, body)
	}
	s.waitWord("eve", words.NotWalledChoice.String())
	if _, body := s.get("/eve/write?path=" + table); !strings.HasPrefix(body, "denied") {
		t.Errorf("eve, unwalled by its owner, writing the table = %q; want denied", body)
	}
	if b, _ := os.ReadFile(table); string(b) != doc {
		t.Errorf("the table changed:\n%s", b)
	}

	// A table someone but root may write is never read.
	s.stopToybox()
	if err := os.Chmod(table, 0o666); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(bins, "toybox"), "serve", "--state", s.state, "--admin", s.admin, "--walls-table", table).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "writable by group or others") {
		t.Errorf("toybox serve with a 0666 table = %v\n%s\nwant it refused", err, out)
	}
}

// TestSharedFolder: a host folder the operator's table shares with one
// vat, and a state folder it keeps. The vat reads and changes the entries
// shared, and its word and wall line say so; every other entry stays
// masked, the folder's siblings are not there, and another vat sees none
// of it.
func TestSharedFolder(t *testing.T) {
	host := hostTree(t)
	crow := filepath.Join(host, "crow")
	data := filepath.Join(crow, "data")
	sessions := filepath.Join(crow, "sessions")
	for _, d := range []string{crow, data, sessions} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(crow, 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(data, "crow.db"), "rows", 0o666)
	mustWrite(t, filepath.Join(data, "tasks.db"), "tasks", 0o666)
	mustWrite(t, filepath.Join(crow, "identity.key"), "the host's key", 0o644)
	table := writeTable(t, fmt.Sprintf(`{
		"shares": [
			{"name": "Crow's database", "folder": %q, "entries": ["crow.db"], "vats": ["media"]},
			{"name": "Crow's storage", "env": {"S3_KEY": "k-123"}, "vats": ["media"]}
		],
		"state": {"media": [%q]}
	}`, data, sessions))
	s := newStack(t, stackOpts{extra: []string{"--walls-table", table}})

	names := "Crow's database, Crow's storage"
	s.mustInstall("media", example(t, "snoop"), "")
	st := s.waitWord("media", words.NotWalledShares.With("en", names))
	wantWords(t, st, words.NotWalledShares, names)
	wantLine := words.LineSharesEntries.In("en", "Crow's database", "crow.db", data) + " " +
		words.LineSharesCredentials.In("en", "Crow's storage", "S3_KEY") + " " +
		words.LineStateFolder.In("en", sessions) + " " + words.LineNotCovered.In("en")
	if st["wall_line"] != wantLine {
		t.Errorf("wall_line\n%q\nwant\n%q", st["wall_line"], wantLine)
	}
	if es := fmt.Sprint(st["wall_line_es"]); !strings.HasSuffix(es, words.LineNotCovered.In("es")) || !strings.Contains(es, "Comparte Crow's database") {
		t.Errorf("wall_line_es %q", es)
	}

	s.mustGet("/media/read?path="+filepath.Join(data, "crow.db"), "ok: rows")
	s.mustGet("/media/write?path="+filepath.Join(data, "crow.db"), "ok: written")
	if b, _ := os.ReadFile(filepath.Join(data, "crow.db")); string(b) != "snooped" {
		t.Errorf("crow.db on the host = %q; want the vat's write", b)
	}
	if _, body := s.get("/media/env"); !strings.Contains(body, "\nS3_KEY=k-123\n") {
		t.Errorf("media's environment lacks the shared credentials:\n%s", body)
	}
	s.mustGet("/media/write?path="+filepath.Join(sessions, "s1"), "ok: written")
	if b, _ := os.ReadFile(filepath.Join(sessions, "s1")); string(b) != "snooped" {
		t.Errorf("the state folder on the host holds %q; want the vat's write", b)
	}

	// The attack: the rest of the folder, and its siblings.
	for _, p := range []string{filepath.Join(data, "tasks.db"), filepath.Join(crow, "identity.key")} {
		if _, body := s.get("/media/read?path=" + p); strings.HasPrefix(body, "ok: tasks") || strings.HasPrefix(body, "ok: the host's key") {
			t.Errorf("media read %s: %q; want it masked", p, body)
		}
	}
	if _, body := s.get("/media/write?path=" + filepath.Join(data, "tasks.db")); !strings.HasPrefix(body, "denied") {
		t.Errorf("media wrote the masked tasks.db: %q", body)
	}
	if b, _ := os.ReadFile(filepath.Join(data, "tasks.db")); string(b) != "tasks" {
		t.Errorf("tasks.db on the host = %q; want it untouched", b)
	}
	// An entry the host makes in the folder while the vat runs has no
	// mask until the vat starts again: its line may not say it hidden.
	mustWrite(t, filepath.Join(data, "later.db"), "later", 0o666)
	if _, body := s.get("/media/read?path=" + filepath.Join(data, "later.db")); strings.HasPrefix(body, "ok: later") {
		for _, lang := range []string{"en", "es"} {
			if line := words.LineSharesEntries.In(lang, "Crow's database", "crow.db", data); !strings.Contains(line, map[string]string{"en": "starts again", "es": "vuelva a arrancar"}[lang]) {
				t.Errorf("media reads later.db, made after it started; its line (%s) says %q", lang, line)
			}
		}
	}
	if _, body := s.get("/media/list?path=" + crow); strings.Contains(body, "identity.key") {
		t.Errorf("media lists the shared folder's parent: %q; want no sibling there", body)
	}
	// Beside the shared folder the wall has only its own /tmp.
	s.get("/media/write?path=" + filepath.Join(crow, "planted"))
	if _, err := os.Stat(filepath.Join(crow, "planted")); err == nil {
		t.Errorf("media wrote a file beside the shared folder, on the host")
	}

	// Another vat, walled, in no entry of the table: none of it.
	s.mustInstall("eve", example(t, "snoop"), "")
	st = s.waitWord("eve", words.Walled.String())
	if st["wall_line"] != words.LineNotCovered.In("en") {
		t.Errorf("eve's wall_line %q; want the fixed sentence alone", st["wall_line"])
	}
	for _, p := range []string{"/eve/read?path=" + filepath.Join(data, "crow.db"), "/eve/write?path=" + filepath.Join(sessions, "s2")} {
		if _, body := s.get(p); !strings.HasPrefix(body, "denied") {
			t.Errorf("GET %s = %q; want denied (eve shares nothing)", p, body)
		}
	}
	if _, body := s.get("/eve/env"); strings.Contains(body, "S3_KEY") {
		t.Errorf("eve holds media's credentials:\n%s", body)
	}
}

// TestUnwalledStatusTellsTheTruth: a vat the kill switch runs without its
// wall uses toybox's network directly, whatever its Handle admits. With
// the switchboard gone it still reaches a server its grant does not
// name, so neither the page nor toybox reach may say that it reaches
// nothing right now, or nothing else.
func TestUnwalledStatusTellsTheTruth(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello from the host")
	}))
	defer srv.Close()
	s := newStack(t, stackOpts{env: []string{"TOYBOX_WALLS=off"}})
	s.mustInstall("erin", example(t, "egress-probe"), q("egress", `{"host":"192.0.2.1","port":80}`))
	s.waitWord("erin", words.NotWalledOperator.String())
	_ = s.sb.Process.Kill()
	_ = s.sb.Wait()
	s.sb = nil
	if _, body := s.get("/erin?url=" + url.QueryEscape(srv.URL+"/")); !strings.Contains(body, "got: hello from the host") {
		t.Fatalf("the unwalled vat fetching %s with the switchboard gone = %q; want it reached (a control: what the words must say)", srv.URL, body)
	}
	var vats string
	waitFor(t, "the page to say the switchboard does not answer", 10*time.Second, func() bool {
		_, body := s.adminDo("GET", "/ui/status.json", nil)
		var p struct {
			Host struct {
				Up bool `json:"switchboard_up"`
			} `json:"host"`
			Vats json.RawMessage `json:"vats"`
		}
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatalf("status.json: %v: %s", err, body)
		}
		vats = string(p.Vats)
		return !p.Host.Up
	})
	out, _ := exec.Command(filepath.Join(bins, "toybox"), "reach", "--admin", s.admin, "erin").CombinedOutput()
	for _, never := range []string{"can reach nothing", "Nothing else: every other address is refused"} {
		if strings.Contains(vats, never) {
			t.Errorf("erin on the page says %q:\n%s", never, vats)
		}
		if strings.Contains(string(out), never) {
			t.Errorf("toybox reach erin says %q:\n%s", never, out)
		}
	}
	wantIn(t, "toybox reach erin", string(out), "without its wall", "the switchboard is not answering")
}

// TestDoctorStateDir: toybox doctor --state names the state dir serve
// would use. A state dir on a read-only file system stops serve at start
// ("locking the state dir: ... read-only file system"), and one on a full
// file system lets serve start but write nothing (no wall's /etc, no code,
// no record): doctor said "walls can be built on this host" and exited 0
// for both. Each must fail, naming the problem and the fix; a state dir
// that serve can use passes.
func TestDoctorStateDir(t *testing.T) {
	testenv.RequireRoot(t)
	mountTmpfs := func(t *testing.T, opts string) string {
		t.Helper()
		dir := t.TempDir()
		if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
			testenv.Unavailable(t, "mounting a tmpfs: "+err.Error())
		}
		t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
		return dir
	}
	ro := mountTmpfs(t, "size=1m")
	if err := syscall.Mount("", ro, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	full := mountTmpfs(t, "size=64k")
	// Fill it: a tmpfs's last page goes to the file that asks first.
	f, err := os.OpenFile(filepath.Join(full, "fill"), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	_ = f.Close()
	notDir := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	good := mountTmpfs(t, "size=16m")

	for _, tt := range []struct {
		name, state string
		fail        bool
		want        []string
	}{
		{"read-only", ro, true, []string{"FAIL state dir: " + ro, "read-only file system", "fix: "}},
		{"full", full, true, []string{"FAIL state dir: " + full, "no space left", "fix: "}},
		{"not a folder", notDir, true, []string{"FAIL state dir: " + notDir, "not a directory", "fix: "}},
		{"usable", good, false, []string{"ok   state dir: " + good}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := exec.Command(filepath.Join(bins, "toybox"), "doctor", "--state", tt.state, "--entry", filepath.Join(bins, "toybox-entry")).CombinedOutput()
			var exit *exec.ExitError
			switch {
			case tt.fail && !(errors.As(err, &exit) && exit.ExitCode() == 1):
				t.Errorf("toybox doctor --state %s (%s) = %v; want exit 1\n%s", tt.state, tt.name, err, out)
			case tt.fail && strings.Contains(string(out), "walls can be built on this host"):
				t.Errorf("toybox doctor --state %s (%s) says walls can be built\n%s", tt.state, tt.name, out)
			case !tt.fail && !strings.Contains(string(out), "ok   state dir: "):
				t.Errorf("toybox doctor --state %s (%s): no state dir line\n%s", tt.state, tt.name, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("toybox doctor --state %s (%s):\n%s\nwant it to say %q", tt.state, tt.name, out, w)
				}
			}
			doctorHonest(t, string(out))
		})
	}
}

// doctorHonest checks doctor's output: it says which uid the checks ran
// as, and every warning and failure is followed by its fix.
func doctorHonest(t *testing.T, out string) {
	t.Helper()
	if want := fmt.Sprintf("checked as: uid %d", os.Geteuid()); !strings.Contains(out, want) {
		t.Errorf("toybox doctor:\n%s\nwant a line %q (the results may differ for serve's user)", out, want)
	}
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "warn ") && !strings.HasPrefix(l, "FAIL ") {
			continue
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "     fix: ") {
			t.Errorf("toybox doctor: %q has no fix line\n%s", l, out)
		}
	}
}

// TestDoctorUsage: doctor's usage line names every flag it takes.
func TestDoctorUsage(t *testing.T) {
	out, err := exec.Command(filepath.Join(bins, "toybox"), "doctor", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("toybox doctor --help: %v\n%s", err, out)
	}
	usage, rest, _ := strings.Cut(string(out), "\n")
	n := 0
	for _, l := range strings.Split(rest, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || !strings.HasPrefix(l, "  -") {
			continue
		}
		n++
		if name := strings.TrimPrefix(f[0], "-"); !strings.Contains(usage, "[--"+name+" ") && !strings.Contains(usage, "[--"+name+"]") {
			t.Errorf("toybox doctor --help: the usage line %q omits --%s", usage, name)
		}
	}
	if n == 0 {
		t.Fatalf("toybox doctor --help lists no flags:\n%s", out)
	}
}
