package testenv

import (
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// NPMBefore pins the trees of the real packages a test mirrors: npm
// resolves each range as the registry stood then (npm install --before),
// so a new release of a dependency changes nothing here.
const NPMBefore = "2026-12-01"

// mirrorLock is the part of npm's package-lock.json the mirror reads.
type mirrorLock struct {
	Packages map[string]struct {
		Name      string `json:"name"`
		Version   string `json:"version"`
		Integrity string `json:"integrity"`
		Link      bool   `json:"link"`
	} `json:"packages"`
}

// MirrorNPM returns the tarballs of the real package spec (name@exact
// version) and of every package of its tree, as npm on the host resolves it
// from the real registry (NPMBefore), for a test to publish into its
// loopback registry (npmtest). The lock and the tarballs are kept in the
// cache folder, so a warm cache asks the registry nothing. Each tarball
// is checked against the lock's integrity before it is returned. A host
// that cannot reach the registry is unavailable (Unavailable).
func MirrorNPM(t testing.TB, spec string) [][]byte {
	t.Helper()
	name, version, ok := strings.Cut(strings.TrimPrefix(spec, "@"), "@")
	if !ok {
		t.Fatalf("MirrorNPM(%q): want name@version", spec)
	}
	if strings.ContainsAny(version, "^~<>=|* ") {
		t.Fatalf("MirrorNPM(%q): want an exact version", spec)
	}
	if strings.HasPrefix(spec, "@") {
		name = "@" + name
	}
	dir := filepath.Join(CacheDir(t), "npm-mirror", strings.NewReplacer("/", "+").Replace(spec)+"-before-"+NPMBefore)
	done := filepath.Join(dir, "complete")
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	installOnce(t, dir, done, func() error { return mirrorFetch(dir, spec) })
	lb, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	var lock mirrorLock
	if err := json.Unmarshal(lb, &lock); err != nil {
		t.Fatalf("the mirrored lock of %s: %v", spec, err)
	}
	seen := map[string]bool{}
	var tarballs [][]byte
	for path, p := range lock.Packages {
		if path == "" || p.Link {
			continue
		}
		pname := p.Name
		if pname == "" {
			pname = path[strings.LastIndex(path, "node_modules/")+len("node_modules/"):]
		}
		id := pname + "@" + p.Version
		if seen[id] {
			continue
		}
		seen[id] = true
		tgz, err := os.ReadFile(filepath.Join(dir, "tarballs", mirrorFile(pname, p.Version)))
		if err != nil {
			t.Fatalf("the mirror of %s lacks %s: %v (remove %s to fetch it again)", spec, id, err, dir)
		}
		sum := sha512.Sum512(tgz)
		if got := "sha512-" + base64.StdEncoding.EncodeToString(sum[:]); got != p.Integrity {
			t.Fatalf("the mirrored tarball of %s is %s; its lock says %s (remove %s to fetch it again)", id, got, p.Integrity, dir)
		}
		tarballs = append(tarballs, tgz)
	}
	if !seen[name+"@"+version] {
		t.Fatalf("the mirrored lock of %s does not hold it", spec)
	}
	return tarballs
}

// mirrorFile is the file name npm pack gives name@version's tarball.
func mirrorFile(name, version string) string {
	return strings.ReplaceAll(strings.TrimPrefix(name, "@"), "/", "-") + "-" + version + ".tgz"
}

// mirrorFetch resolves spec's tree with the host's npm into dir's
// package-lock.json and fetches every tarball of it into dir/tarballs.
func mirrorFetch(dir, spec string) error {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Errorf("npm is not installed (the nodejs package): it mirrors %s", spec)
	}
	env := append(os.Environ(), "npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false")
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"toybox-mirror","version":"0.0.0","private":true}`), 0o644); err != nil {
		return err
	}
	cmd := exec.Command(npm, "install", "--package-lock-only", "--ignore-scripts", "--omit=dev", "--before="+NPMBefore, "--loglevel=error", "--save-exact", spec)
	cmd.Dir, cmd.Env = dir, env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("resolving %s with npm from the real registry (is it reachable?): %w\n%s", spec, err, out)
	}
	lb, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return err
	}
	var lock mirrorLock
	if err := json.Unmarshal(lb, &lock); err != nil {
		return err
	}
	want := map[string]bool{}
	for path, p := range lock.Packages {
		if path == "" || p.Link {
			continue
		}
		if p.Name != "" {
			return fmt.Errorf("%s: %s is an alias of %s: the mirror cannot serve it", spec, path, p.Name)
		}
		want[path[strings.LastIndex(path, "node_modules/")+len("node_modules/"):]+"@"+p.Version] = true
	}
	specs := make([]string, 0, len(want))
	for s := range want {
		specs = append(specs, s)
	}
	tarballs := filepath.Join(dir, "tarballs")
	if err := os.Mkdir(tarballs, 0o755); err != nil {
		return err
	}
	cmd = exec.Command(npm, append([]string{"pack", "--ignore-scripts", "--loglevel=error", "--pack-destination", tarballs}, specs...)...)
	cmd.Dir, cmd.Env = dir, env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("fetching the %d tarballs of %s with npm pack from the real registry: %w\n%s", len(specs), spec, err, out)
	}
	return os.WriteFile(filepath.Join(dir, "complete"), nil, 0o644)
}
