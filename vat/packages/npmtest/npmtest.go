// Package npmtest serves a small npm registry on loopback for tests.
//
// It serves the packuments and tarballs of packages packed with the real npm from
// fixture folders.
package npmtest

import (
	"bytes"
	"crypto/sha1" //nolint:gosec // the registry's shasum field, beside the sha512 integrity
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"toybox/vat/packages"
)

// TB is the part of testing.TB the registry uses: tests pass theirs, the
// benchmarks (bench) their own.
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Skip(args ...any)
	Cleanup(f func())
	TempDir() string
}

// Registry is a registry serving on 127.0.0.1.
type Registry struct {
	URL string

	mu       sync.Mutex
	pkgs     map[string]map[string]version // name -> version -> its document
	tarballs map[string][]byte             // path -> bytes
	requests map[string]int                // path -> requests
	srv      *http.Server
}

type version struct {
	doc map[string]any
}

// Start serves an empty registry until the test ends.
func Start(t TB) *Registry {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Registry{URL: "http://" + l.Addr().String() + "/", pkgs: map[string]map[string]version{}, tarballs: map[string][]byte{}, requests: map[string]int{}}
	r.srv = &http.Server{Handler: r}
	go func() { _ = r.srv.Serve(l) }()
	t.Cleanup(func() { _ = r.srv.Close() })
	return r
}

// Requests is how many requests the registry has answered (or refused).
func (r *Registry) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.requests {
		n += c
	}
	return n
}

// Fixture is the folder of a fixture package in this package's testdata.
func Fixture(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", name)
}

var (
	packMu sync.Mutex
	packed = map[string][]byte{}
)

// Pack packs dir with the real npm (npm pack, scripts off) and returns the
// tarball (once per folder and test binary).
func Pack(t TB, dir string) []byte {
	t.Helper()
	packMu.Lock()
	defer packMu.Unlock()
	if b, ok := packed[dir]; ok {
		return b
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed")
	}
	out, err := os.MkdirTemp("", "npmtest-pack-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(out)
	cmd := exec.Command(npm, "pack", "--ignore-scripts", "--pack-destination", out, "--loglevel=error")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false", "npm_config_cache="+filepath.Join(out, ".cache"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm pack %s: %v\n%s", dir, err, b)
	}
	ents, err := filepath.Glob(filepath.Join(out, "*.tgz"))
	if err != nil || len(ents) != 1 {
		t.Fatalf("npm pack %s made %v", dir, ents)
	}
	b, err := os.ReadFile(ents[0])
	if err != nil {
		t.Fatal(err)
	}
	packed[dir] = b
	return b
}

// PackWith packs a copy of fixture with each old string of its
// package.json replaced by the new one (pairs).
func PackWith(t TB, fixture string, oldNew ...string) []byte {
	t.Helper()
	dir := t.TempDir()
	src := Fixture(fixture)
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "package.json" {
			b = []byte(strings.NewReplacer(oldNew...).Replace(string(b)))
		}
		fi, _ := e.Info()
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return Pack(t, dir)
}

// Publish adds the packed tarball tgz (its package.json read from the
// fixture folder dir) to the registry, with its real integrity.
func (r *Registry) Publish(t TB, tgz []byte) {
	t.Helper()
	pj := readPackageJSON(t, tgz)
	r.publish(pj, pj["name"].(string), tgz)
}

// PublishAs is Publish under name, whatever name the tarball's
// package.json gives: a hostile registry's tarball.
func (r *Registry) PublishAs(t TB, name string, tgz []byte) {
	t.Helper()
	r.publish(readPackageJSON(t, tgz), name, tgz)
}

func (r *Registry) publish(pj map[string]any, name string, tgz []byte) {
	ver := pj["version"].(string)
	base := name
	if i := strings.LastIndex(name, "/"); i >= 0 {
		base = name[i+1:]
	}
	path := "/" + name + "/-/" + base + "-" + ver + ".tgz"
	sum := sha512.Sum512(tgz)
	sh := sha1.Sum(tgz) //nolint:gosec
	doc := map[string]any{"name": name, "version": ver}
	for _, k := range []string{"dependencies", "optionalDependencies", "peerDependencies", "peerDependenciesMeta", "bin", "engines", "os", "cpu", "libc"} {
		if v, ok := pj[k]; ok {
			doc[k] = v
		}
	}
	if sc, ok := pj["scripts"].(map[string]any); ok {
		for _, k := range []string{"preinstall", "install", "postinstall"} {
			if sc[k] != nil {
				doc["hasInstallScript"] = true
			}
		}
	}
	doc["dist"] = map[string]any{
		"tarball":   strings.TrimSuffix(r.URL, "/") + path,
		"integrity": "sha512-" + base64.StdEncoding.EncodeToString(sum[:]),
		"shasum":    hex.EncodeToString(sh[:]),
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pkgs[name] == nil {
		r.pkgs[name] = map[string]version{}
	}
	r.pkgs[name][ver] = version{doc: doc}
	r.tarballs[path] = tgz
}

// Tamper makes the registry serve other bytes (a valid tarball of other
// code, say) as name@ver's tarball; its packument keeps the true
// integrity, as a registry or a path to it that was tampered with would.
func (r *Registry) Tamper(name, ver string, other []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	base := name
	if i := strings.LastIndex(name, "/"); i >= 0 {
		base = name[i+1:]
	}
	r.tarballs["/"+name+"/-/"+base+"-"+ver+".tgz"] = bytes.Clone(other)
}

func readPackageJSON(t TB, tgz []byte) map[string]any {
	t.Helper()
	dir := t.TempDir()
	tree, err := packages.NewTree(dir, packages.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer tree.Close()
	if err := tree.Unpack(bytes.NewReader(tgz), "p"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "p", "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pj map[string]any
	if err := json.Unmarshal(b, &pj); err != nil {
		t.Fatal(err)
	}
	return pj
}

// ServeHTTP answers packuments (GET /<name>, /@scope%2fname) and
// tarballs.
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	path := req.URL.EscapedPath()
	r.mu.Lock()
	r.requests[path]++
	if b, ok := r.tarballs[req.URL.Path]; ok {
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(b)
		return
	}
	name := strings.ReplaceAll(strings.TrimPrefix(path, "/"), "%2f", "/")
	name = strings.ReplaceAll(name, "%2F", "/")
	vs, ok := r.pkgs[name]
	if !ok {
		r.mu.Unlock()
		http.Error(w, `{"error":"Not found"}`, http.StatusNotFound)
		return
	}
	var keys []string
	docs := map[string]any{}
	for v, d := range vs {
		keys = append(keys, v)
		docs[v] = d.doc
	}
	r.mu.Unlock()
	sort.Slice(keys, func(i, j int) bool {
		a, _ := packages.ParseVersion(keys[i])
		b, _ := packages.ParseVersion(keys[j])
		return a.Compare(b) < 0
	})
	doc := map[string]any{"name": name, "dist-tags": map[string]string{"latest": keys[len(keys)-1]}, "versions": docs, "modified": "2026-01-01T00:00:00.000Z"}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(doc); err != nil {
		fmt.Fprintln(os.Stderr, "npmtest:", err)
	}
}
