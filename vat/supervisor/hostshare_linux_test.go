package supervisor

import (
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"toybox/tests/testenv"
	"toybox/vat/store"
	"toybox/vat/switches"
	"toybox/vat/wall"
	"toybox/vat/words"
)

// TestShareEnvIsNoFileGrant: a credential set the operator's table shares
// with a vat is environment, never a bind. A manifest that names one of
// its keys in sandbox.files gets no folder bound from the operator's
// value: files are the owner's values only.
func TestShareEnvIsNoFileGrant(t *testing.T) {
	tab, err := switches.ParseTable([]byte(`{"shares": [{"name": "Crow's home", "env": {"CROW_HOME": "/srv/crow", "OTHER": "/srv/other"}, "vats": ["media"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	specs := make(chan wall.Spec, 16)
	s, _ := noWallSupervisor(t, func(spec wall.Spec) {
		select {
		case specs <- spec:
		default:
		}
	})
	sw, err := switches.New(switches.Config{StateDir: s.cfg.Store.StateDir(), Table: tab})
	if err != nil {
		t.Fatal(err)
	}
	s.cfg.Switches = sw
	b := tarBundle(t, map[string]string{
		"manifest.json": `{"command":["./app"],"env":["CROW_HOME","OTHER"],"sandbox":{"files":{"read":["OTHER"],"write":["CROW_HOME"],"oauthDir":["CROW_HOME"]}}}`,
		"app":           "#!/bin/sh\nexit 0\n",
	})
	rec := httptest.NewRecorder()
	s.AdminHandler().ServeHTTP(rec, httptest.NewRequest("PUT", "http://toybox/media", b))
	select {
	case spec := <-specs:
		if spec.Env["CROW_HOME"] != "/srv/crow" {
			t.Errorf("Spec.Env[CROW_HOME] = %q; want the operator's value", spec.Env["CROW_HOME"])
		}
		all := slices.Concat(spec.Files.Read, spec.Files.Write, spec.Files.OAuthDir)
		if len(all) != 0 {
			t.Errorf("Spec.Files = %+v; want none: the manifest turned the operator's credentials into binds", spec.Files)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the supervisor never launched the wall (PUT: %d %s)", rec.Code, rec.Body)
	}
}

// TestUnwalledAsToyboxSaysSo: a vat run without its wall as toybox's own
// user (a supervisor that is not root gives vats no uids of their own)
// can change toybox's state: every vat's code and data, and walls.json,
// where the owner's choices unwall vats. Its wall line says so; a vat
// with a uid of its own does not read so.
func TestUnwalledAsToyboxSaysSo(t *testing.T) {
	testenv.RequireRoot(t)
	for _, own := range []bool{false, true} {
		t.Run(fmt.Sprintf("as toybox %v", own), func(t *testing.T) {
			dir, err := os.MkdirTemp("", "tbx-sup-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			st, err := store.Open(store.Config{StateDir: filepath.Join(dir, "state")})
			if err != nil {
				t.Fatal(err)
			}
			sw, err := switches.New(switches.Config{Kill: "off", StateDir: st.StateDir()})
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{Store: st, Switches: sw, UIDBase: testUIDBase, Hosts: testHosts(t), StopGrace: time.Second, ReadyTimeout: 10 * time.Second}
			if own {
				// As a supervisor that is not root: vats run as its user.
				cfg.UIDBase, cfg.UID, cfg.GID = -1, -1, -1
			}
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			shutdownAtEnd(t, s)
			stat, _, err := s.Install(InstallRequest{ID: "backend", Code: storeFile(t, st, shellScriptApp(t))})
			if err != nil {
				t.Fatal(err)
			}
			if stat.Word() != words.NotWalledOperator {
				t.Fatalf("status %q; want %q", stat.Status, words.NotWalledOperator)
			}
			for _, lang := range []string{"en", "es"} {
				line := stat.WallLine
				if lang == "es" {
					line = stat.WallLineES
				}
				if got := strings.Contains(line, words.LineUnwalledAsToybox.In(lang)); got != own {
					t.Errorf("wall line (%s) %q; says it runs as toybox's user: %v, want %v", lang, line, got, own)
				}
			}
		})
	}
}

// TestUnwalledSharedCredentialsSaid: a vat run without its wall still
// gets the credential sets the operator's table shares with it (its
// environment), so its wall line names them, as a walled vat's does.
func TestUnwalledSharedCredentialsSaid(t *testing.T) {
	testenv.RequireRoot(t)
	tab, err := switches.ParseTable([]byte(`{"shares": [{"name": "the shop's storage", "env": {"S3_KEY": "k"}, "vats": ["shop"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	s, st, _ := unwalledSupervisor(t, time.Second)
	sw, err := switches.New(switches.Config{Kill: "off", StateDir: st.StateDir(), Table: tab})
	if err != nil {
		t.Fatal(err)
	}
	s.cfg.Switches = sw
	stat, _, err := s.Install(InstallRequest{ID: "shop", Code: storeFile(t, st, shellScriptApp(t))})
	if err != nil {
		t.Fatal(err)
	}
	if stat.Word() != words.NotWalledOperator {
		t.Fatalf("status %q; want %q", stat.Status, words.NotWalledOperator)
	}
	for _, lang := range []string{"en", "es"} {
		line := stat.WallLine
		if lang == "es" {
			line = stat.WallLineES
		}
		if want := words.LineSharesCredentials.In(lang, "the shop's storage", "S3_KEY"); !strings.Contains(line, want) {
			t.Errorf("wall line (%s) %q; want it to say %q", lang, line, want)
		}
	}
}

// TestDockerSocketFlagAddsToTheDefaults: naming another Docker socket
// (--docker-socket) does not make the usual ones unreachable. An
// unwalled vat that may connect to either is said to reach Docker.
func TestDockerSocketFlagAddsToTheDefaults(t *testing.T) {
	dir := t.TempDir()
	usual, named := filepath.Join(dir, "usual.sock"), filepath.Join(dir, "named.sock")
	for _, p := range []string{usual, named} {
		l, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	}
	if err := os.Chmod(usual, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(named, 0o600); err != nil {
		t.Fatal(err)
	}
	old := defaultDockerSockets
	defaultDockerSockets = []string{usual}
	defer func() { defaultDockerSockets = old }()
	s := &Supervisor{cfg: Config{DockerSockets: []string{named}}}
	if !s.dockerReachable(1000, 1000, nil) {
		t.Errorf("dockerReachable with %s 0666 and --docker-socket %s = false; want true", usual, named)
	}
	s.cfg.DockerSockets = nil
	if !s.dockerReachable(1000, 1000, nil) {
		t.Errorf("dockerReachable with %s 0666 = false; want true (a control)", usual)
	}
}

// TestUnwalledDockerInTheWord: whoever holds the Docker socket is root on
// the host. An unwalled vat that may connect to it says so in its status
// word, whatever switch unwalled it (not only where there is no
// bubblewrap), so toybox status and the notices say it too.
func TestUnwalledDockerInTheWord(t *testing.T) {
	testenv.RequireRoot(t)
	sock := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	s, st, _ := unwalledWith(t, Config{StopGrace: time.Second, ReadyTimeout: 10 * time.Second, DockerSockets: []string{sock}})
	stat, _, err := s.Install(InstallRequest{ID: "backend", Code: storeFile(t, st, shellScriptApp(t))})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stat.WallLine, words.LineDocker.In("en")) {
		t.Fatalf("wall line %q; want the Docker line (a control)", stat.WallLine)
	}
	for _, lang := range []string{"en", "es"} {
		got := stat.Status
		if lang == "es" {
			got = stat.StatusES
		}
		if want := words.PageDockerReachable.In(lang); !strings.Contains(got, want) {
			t.Errorf("status (%s) %q; want it to say %q", lang, got, want)
		}
	}
	if stat.Word() != words.NotWalledOperator {
		t.Errorf("word %v; want %v (the detail rides beside it)", stat.Word(), words.NotWalledOperator)
	}
}

// TestOnlyWalledRemedyNamesTheSwitch: a vat that runs only inside its
// wall (a stdio MCP server) is off when a switch unwalls it. The fix its
// reason gives is the switch's: the owner's POST /<vat>/walls?walled=true
// mends only the owner's own choice, not the kill switch.
func TestOnlyWalledRemedyNamesTheSwitch(t *testing.T) {
	testenv.RequireRoot(t)
	s, st, _ := unwalledSupervisor(t, time.Second)
	// It stays off: its status says why.
	_, _, _ = s.Install(InstallRequest{ID: "bridge", Code: storeFile(t, st, shellScriptApp(t)), MCP: "stdio", MCPSent: true})
	stat, err := s.Status("bridge")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stat.LastError, "runs only inside its wall") {
		t.Fatalf("last error %q; want it off for running unwalled (a control)", stat.LastError)
	}
	if strings.Contains(stat.LastError, "walls?walled=true") || !strings.Contains(stat.LastError, "TOYBOX_WALLS=off") {
		t.Errorf("last error %q; want the kill switch named as the cause, not the owner's choice", stat.LastError)
	}
}
