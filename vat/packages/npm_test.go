package packages_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"toybox/tests/testenv"
	"toybox/vat/packages"
	"toybox/vat/packages/npmtest"
)

// directRunner runs each step as a plain child (no wall: the walled path
// is tests/packages_test.go), with only the step's environment.
func directRunner(t *testing.T, work string, steps *[]string) packages.Runner {
	return func(ctx context.Context, step string, argv []string, env map[string]string) error {
		*steps = append(*steps, step)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = work
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + work}
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Logf("step %s: %v\n%s", step, err, out)
			return errors.New(packages.ReasonPrepare)
		}
		return nil
	}
}

func publishFixtures(t *testing.T) *npmtest.Registry {
	t.Helper()
	reg := npmtest.Start(t)
	for _, f := range []string{"tb-greeting-1.0.0", "tb-greeting-1.1.0", "tb-mcp-hello", "tb-postinstall"} {
		reg.Publish(t, npmtest.Pack(t, npmtest.Fixture(f)))
	}
	return reg
}

func prepare(t *testing.T, reg *npmtest.Registry, spec string, allow ...string) (string, packages.Lock, error) {
	t.Helper()
	node, ver, npm := testenv.HostNode(t)
	work := t.TempDir()
	script := filepath.Join(t.TempDir(), "fetch.js")
	if err := os.WriteFile(script, packages.FetchScript, 0o644); err != nil {
		t.Fatal(err)
	}
	sp, err := packages.ParsePackage(spec)
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	cfg := packages.NPMConfig{Registry: reg.URL, Node: node, NodeVersion: ver, NPM: npm, Script: script}
	tree, lock, err := packages.PrepareNPM(context.Background(), cfg, directRunner(t, work, &steps), work, packages.Request{Spec: sp, Allow: allow, MCP: json.RawMessage(`{"transport":"stdio"}`)})
	return tree, lock, err
}

func bundleHash(t *testing.T, tree string) string {
	t.Helper()
	fl, err := packages.Manifest(tree)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := packages.WriteBundle(&b, tree, fl); err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b.Bytes())
	return hex.EncodeToString(s[:])
}

// TestPrepareNPMLockAndIntegrity installs a package with a dependency
// through the real npm against a loopback registry: the range resolves
// once to the newest match, the lock names every package with its
// integrity, and two installs give the same code hash.
func TestPrepareNPMLockAndIntegrity(t *testing.T) {
	reg := publishFixtures(t)
	tree, lock, err := prepare(t, reg, "npm:tb-mcp-hello@^1")
	if err != nil {
		t.Fatal(err)
	}
	if lock.Name != "tb-mcp-hello" || lock.Version != "1.0.0" {
		t.Errorf("lock resolved %s@%s; want tb-mcp-hello@1.0.0", lock.Name, lock.Version)
	}
	got := map[string]string{}
	for _, p := range lock.Packages {
		if !strings.HasPrefix(p.Integrity, "sha512-") || !strings.HasPrefix(p.Resolved, reg.URL) {
			t.Errorf("package %s: integrity %q resolved %q; want sha512 from the registry", p.Path, p.Integrity, p.Resolved)
		}
		got[p.Path] = p.Version
	}
	want := map[string]string{"node_modules/tb-mcp-hello": "1.0.0", "node_modules/tb-greeting": "1.1.0"}
	if len(got) != len(want) || got["node_modules/tb-greeting"] != "1.1.0" || got["node_modules/tb-mcp-hello"] != "1.0.0" {
		t.Errorf("lock packages = %v; want %v", got, want)
	}
	if lock.Command[1] != "node_modules/tb-mcp-hello/server.js" {
		t.Errorf("command = %v; want node node_modules/tb-mcp-hello/server.js", lock.Command)
	}
	h1 := bundleHash(t, tree)
	tree2, _, err := prepare(t, reg, "npm:tb-mcp-hello@^1")
	if err != nil {
		t.Fatal(err)
	}
	if h2 := bundleHash(t, tree2); h1 != h2 {
		t.Errorf("two installs of one spec hash to %s and %s; want the same", h1, h2)
	}
	// The installed server answers from its own tree, with no registry.
	before := reg.Requests()
	node, _, _ := testenv.HostNode(t)
	cmd := exec.Command(node, filepath.Join(tree, lock.Command[1]))
	cmd.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"greet","arguments":{"name":"vat"}}}` + "\n")
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), "hello, vat") {
		t.Errorf("the installed server answered %q, %v; want hello, vat", out, err)
	}
	if n := reg.Requests() - before; n != 0 {
		t.Errorf("running it made %d registry requests; want 0", n)
	}
}

// TestPrepareNPMTamperedTarball: a tarball whose bytes differ from the
// integrity the registry's own packument gives is refused before anything
// is unpacked.
func TestPrepareNPMTamperedTarball(t *testing.T) {
	reg := publishFixtures(t)
	// 1.1.0's tarball replaced by 1.0.0's: a valid tarball, other code.
	reg.Tamper("tb-greeting", "1.1.0", npmtest.Pack(t, npmtest.Fixture("tb-greeting-1.0.0")))
	tree, _, err := prepare(t, reg, "npm:tb-mcp-hello@1.0.0")
	if !errors.Is(err, packages.ErrIntegrity) || !strings.Contains(err.Error(), "tb-greeting@1.1.0") {
		t.Fatalf("a tampered tarball: %v; want ErrIntegrity naming tb-greeting@1.1.0", err)
	}
	if tree != "" {
		t.Errorf("a tree was laid out at %s", tree)
	}
}

// TestPrepareNPMInstallScript: a package with a postinstall fails with a
// fixed reason, and its script never ran; allowed, it runs.
func TestPrepareNPMInstallScript(t *testing.T) {
	reg := publishFixtures(t)
	_, _, err := prepare(t, reg, "npm:tb-postinstall")
	if !errors.Is(err, packages.ErrScripts) || !strings.Contains(err.Error(), "?allow-scripts=tb-postinstall") {
		t.Fatalf("a package with a postinstall: %v; want ErrScripts naming the allowance", err)
	}
	tree, lock, err := prepare(t, reg, "npm:tb-postinstall", "tb-postinstall")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(tree, "node_modules/tb-postinstall/postinstall-ran")); err != nil {
		t.Errorf("the allowed postinstall did not run: %v", err)
	}
	if len(lock.Scripts) != 1 || lock.Scripts[0] != "tb-postinstall" {
		t.Errorf("lock.Scripts = %v", lock.Scripts)
	}
}

// TestPrepareNPMScriptStaysInTree: an install script the owner allowed
// runs inside the prepare wall with work writable. It must not make
// toybox bundle another folder than the one it laid out (a manifest.json
// of the script's, granting egress the owner never gave), nor remove or
// write anything outside the tree through a link put in its place.
func TestPrepareNPMScriptStaysInTree(t *testing.T) {
	tests := []struct {
		name string
		// script is the postinstall's JavaScript, run in the package's
		// folder (the tree is ../..); VICTIM is a host folder's path.
		script string
		// fails: the script fails (so does the install, for that reason).
		fails bool
	}{
		{
			name:   "another folder in the tree's place",
			script: `const fs=require('fs'),p=require('path');const t=p.resolve('../..');fs.renameSync(t,t+'-x');fs.cpSync(t+'-x',t,{recursive:true});fs.writeFileSync(p.join(t,'manifest.json'),JSON.stringify({command:['node','x'],network:'internet'}))`,
		},
		{
			name:   "a link in the tree's place",
			script: `const fs=require('fs'),p=require('path');const t=p.resolve('../..');fs.renameSync(t,t+'-x');fs.symlinkSync('VICTIM',t);process.exit(1)`,
			fails:  true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			victim := t.TempDir()
			if err := os.WriteFile(filepath.Join(victim, "package.json"), []byte(`{"name":"the-hosts"}`), 0o644); err != nil {
				t.Fatal(err)
			}
			reg := npmtest.Start(t)
			reg.Publish(t, npmtest.PackWith(t, "tb-postinstall", `require('fs').writeFileSync('postinstall-ran', 'yes')`, strings.ReplaceAll(tt.script, "VICTIM", victim)))
			tree, _, err := prepare(t, reg, "npm:tb-postinstall", "tb-postinstall")
			switch {
			case tt.fails && err == nil:
				t.Errorf("prepare = nil; want the failed script's error")
			case !tt.fails && !errors.Is(err, packages.ErrTreeReplaced):
				t.Errorf("prepare = %v; want ErrTreeReplaced", err)
			}
			if tree != "" {
				if b, err := os.ReadFile(filepath.Join(tree, "manifest.json")); err == nil && strings.Contains(string(b), "internet") {
					t.Errorf("the tree to bundle has the script's manifest.json: %s", b)
				}
			}
			if b, err := os.ReadFile(filepath.Join(victim, "package.json")); err != nil || string(b) != `{"name":"the-hosts"}` {
				t.Errorf("the host folder's package.json = %q, %v; want it kept", b, err)
			}
		})
	}
}

// TestPrepareNPMFetchBounded: the fetch step writes the tarballs to the
// host's disk, in the prepare wall's folder. Each was held to 512 MiB
// but their sum to nothing, so a tree of many large packages could fill
// the host's disk before unpacking refused it. Together they may now be
// no larger than the tree may unpack to.
func TestPrepareNPMFetchBounded(t *testing.T) {
	reg := npmtest.Start(t)
	rnd := rand.New(rand.NewPCG(1, 2))
	noise := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		return string(b)
	}
	deps := map[string]string{}
	for _, name := range []string{"tb-big-a", "tb-big-b", "tb-big-c"} {
		deps[name] = "1.0.0"
	}
	for name := range deps {
		pj := map[string]any{"name": name, "version": "1.0.0", "bin": "x.js"}
		if name == "tb-big-a" {
			pj["dependencies"] = map[string]string{"tb-big-b": "1.0.0", "tb-big-c": "1.0.0"}
		}
		b, _ := json.Marshal(pj)
		reg.Publish(t, makeTgz(t,
			tgzEntry{Header: tar.Header{Name: "package/package.json", Typeflag: tar.TypeReg}, Body: string(b)},
			tgzEntry{Header: tar.Header{Name: "package/x.js", Typeflag: tar.TypeReg}, Body: "// x\n"},
			tgzEntry{Header: tar.Header{Name: "package/blob", Typeflag: tar.TypeReg}, Body: noise(500 << 10)},
		))
	}
	node, ver, npm := testenv.HostNode(t)
	work := t.TempDir()
	script := filepath.Join(t.TempDir(), "fetch.js")
	if err := os.WriteFile(script, packages.FetchScript, 0o644); err != nil {
		t.Fatal(err)
	}
	sp, err := packages.ParsePackage("npm:tb-big-a@1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	lim := packages.Limits{Entries: 16, Bytes: 1 << 20} // 1 MiB, and 8 KiB an entry for headers
	cfg := packages.NPMConfig{Registry: reg.URL, Node: node, NodeVersion: ver, NPM: npm, Script: script, Limits: lim}
	_, _, err = packages.PrepareNPM(context.Background(), cfg, directRunner(t, work, &steps), work, packages.Request{Spec: sp})
	if err == nil {
		t.Fatal("PrepareNPM took 1.5 MiB of tarballs for a tree of at most 1 MiB")
	}
	var fetched int64
	ents, _ := os.ReadDir(filepath.Join(work, "tarballs"))
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			fetched += fi.Size()
		}
	}
	if max := lim.Bytes + int64(lim.Entries)*8<<10; fetched > max {
		t.Errorf("the fetch step wrote %d bytes of tarballs; want at most %d (%v)", fetched, max, err)
	}
}

// TestPrepareNPMScriptOutputBounded: an allowed install script writes
// into the tree inside the prepare wall, past Unpack and its limits.
// The tree it leaves is held to the same limits before toybox lists and
// bundles it: a script that made a million files would otherwise have
// the supervisor hold an entry for each.
func TestPrepareNPMScriptOutputBounded(t *testing.T) {
	reg := npmtest.Start(t)
	script := `const fs=require('fs');for(let i=0;i<40;i++)fs.writeFileSync('f'+i,'x')`
	reg.Publish(t, npmtest.PackWith(t, "tb-postinstall", `require('fs').writeFileSync('postinstall-ran', 'yes')`, script))
	node, ver, npm := testenv.HostNode(t)
	work := t.TempDir()
	fetch := filepath.Join(t.TempDir(), "fetch.js")
	if err := os.WriteFile(fetch, packages.FetchScript, 0o644); err != nil {
		t.Fatal(err)
	}
	sp, err := packages.ParsePackage("npm:tb-postinstall")
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	cfg := packages.NPMConfig{Registry: reg.URL, Node: node, NodeVersion: ver, NPM: npm, Script: fetch, Limits: packages.Limits{Entries: 16}}
	_, _, err = packages.PrepareNPM(context.Background(), cfg, directRunner(t, work, &steps), work, packages.Request{Spec: sp, Allow: []string{"tb-postinstall"}})
	if !errors.Is(err, packages.ErrBadTarball) || !strings.Contains(err.Error(), "more than 16 entries") {
		t.Errorf("a script that writes 40 files into a tree of at most 16 entries: %v; want ErrBadTarball naming the limit", err)
	}
}
