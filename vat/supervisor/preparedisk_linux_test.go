package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"toybox/tests/testenv"
	"toybox/vat/disk"
	"toybox/vat/grant"
	"toybox/vat/packages"
	"toybox/vat/packages/npmtest"
	"toybox/vat/wall"
)

// TestPrepareFolderBounded: an install's prepare folder lay on the state
// file system, and the code store's limits were checked only after a
// step ended. So an allowed install script, or npm or the downloader on a
// hostile registry's answer, could write until the state disk was full,
// and every vat, the store and the records on it failed. Here a step
// writes four times its prepare folder's size in a real wall: it stops at
// ENOSPC, the install fails naming the folder's size, the state file
// system holds no more than the folder's size meanwhile, the code stored
// before is intact, and nothing of the folder (image, mount, loop device)
// stays. A folder a killed supervisor left mounted goes at the next
// start.
func TestPrepareFolderBounded(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireBwrap(t)
	node, ver, npm := testenv.HostNode(t)
	entry := buildEntry(t)
	reg := npmtest.Start(t) // forwarded into the wall; the step asks it nothing
	const bound = 64 << 20
	var (
		mu     sync.Mutex
		steps  int
		held   int64 // the most the state dir's file system held of it while a step ran
		logBuf testenv.Buffer
	)
	var state string
	s, st := testSupervisorWith(t, func(c *Config) {
		state = c.Store.StateDir()
		// The walls' uids reach their folders through it.
		for _, d := range []string{filepath.Dir(state), state} {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
		c.EntryPath = entry
		c.Logger = slog.New(slog.NewJSONHandler(&logBuf, nil))
		c.Upstream = grant.NewUpstream(grant.UpstreamConfig{Path: filepath.Join(t.TempDir(), "switchboard.sock")})
		c.Packages = PackagesConfig{Registry: reg.URL, Node: node, NodeVersion: ver, NPM: npm, Disks: disk.Open(state), PrepareBytes: bound}
		c.Launch = func(ctx context.Context, spec wall.Spec, l *slog.Logger) (Process, error) {
			mu.Lock()
			steps++
			mu.Unlock()
			// The resolve step writes what an allowed script or npm on a
			// hostile registry's answer could: 4×bound, 1 MiB a write.
			spec.Command = []string{node, "-e", fillScript, filepath.Join(spec.DataDir, "fill"), "256"}
			p, err := wall.Start(ctx, spec, l)
			if err != nil {
				return nil, err
			}
			return &measured{Process: p, done: func() {
				n := allocatedOn(t, state)
				mu.Lock()
				held = max(held, n)
				mu.Unlock()
			}}, nil
		}
	})
	if err := s.cfg.Packages.Disks.Support(); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	t.Cleanup(func() { _ = s.cfg.Packages.Disks.Close() })
	// What the store held before: kept, byte for byte.
	before := storeFile(t, st, shellScriptApp(t))
	want, err := os.ReadFile(shellScriptApp(t))
	if err != nil {
		t.Fatal(err)
	}
	base := allocatedOn(t, state)

	sp, err := packages.ParsePackage("npm:tb-postinstall@1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.PreparePackage(context.Background(), PackageRequest{InstallRequest: InstallRequest{ID: "filler"}, Package: packages.Request{Spec: sp, Allow: []string{"tb-postinstall"}}})
	t.Logf("the install: %v", err)
	for _, line := range outputLines(logBuf.String()) {
		t.Logf("the step wrote: %s", line)
	}
	if !errors.Is(err, ErrPrepareFull) || !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "the install wrote more than its 64 MiB prepare folder holds") {
		t.Errorf("an install that writes 256 MiB into a 64 MiB prepare folder: %v; want ErrPrepareFull naming its 64 MiB", err)
	}
	if steps != 1 {
		t.Errorf("%d steps ran; want the one that filled the folder", steps)
	}
	t.Logf("the state file system held %d MiB of the state dir before, %d MiB while the step ran", base>>20, held>>20)
	if held-base > bound {
		t.Errorf("the state dir took %d MiB more on its file system while the step ran; want at most the folder's %d MiB", (held-base)>>20, bound>>20)
	}
	if c, err := st.Code(before.Digest); err != nil {
		t.Errorf("the code stored before the install: %v", err)
	} else if got, err := os.ReadFile(filepath.Join(c.Dir, filepath.Base(c.Manifest.Command[0]))); err != nil || !bytes.Equal(got, want) {
		t.Errorf("the code stored before the install reads %d bytes (%v); want its %d", len(got), err, len(want))
	}
	checkNoPrepareLeft(t, state)

	// A supervisor killed during an install left its folder mounted: the
	// next one unmounts it and removes it with its image.
	left := filepath.Join(state, "prepare", "filler-123456")
	dirs := prepareDirs{code: filepath.Join(left, "code"), data: filepath.Join(left, "data"), run: filepath.Join(left, "run")}
	for _, d := range []string{dirs.code, dirs.data, dirs.run} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	killed, _ := testSupervisorWith(t, func(c *Config) {
		c.Store = st
		c.Packages.Disks = disk.Open(state)
		c.Packages.PrepareBytes = bound
	})
	if _, err := killed.boundPrepare("filler", left, dirs, -1, -1); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dirs.data, "left"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.removePrepareFolders()
	checkNoPrepareLeft(t, state)
}

// TestPrepareFolderUnbounded: where there are no disk limits an install
// runs as before, and one record says its prepare folder is unbounded.
func TestPrepareFolderUnbounded(t *testing.T) {
	var logBuf testenv.Buffer
	s, _ := testSupervisorWith(t, func(c *Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logBuf, nil))
		c.Launch = func(context.Context, wall.Spec, *slog.Logger) (Process, error) {
			return nil, errors.New("no wall in this test")
		}
		c.Upstream = grant.NewUpstream(grant.UpstreamConfig{Path: filepath.Join(t.TempDir(), "switchboard.sock")})
		c.Packages = PackagesConfig{Registry: "http://127.0.0.1:9/", Node: "/usr/bin/node", NodeVersion: "20.0.0", NPM: "/usr/lib/node_modules/npm/bin/npm-cli.js"}
	})
	sp, err := packages.ParsePackage("npm:tb-mcp-hello@1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.PreparePackage(context.Background(), PackageRequest{InstallRequest: InstallRequest{ID: "pkg"}, Package: packages.Request{Spec: sp}})
	if err == nil || errors.Is(err, ErrPrepareFull) || !strings.Contains(err.Error(), "its prepare wall could not start") {
		t.Errorf("an install with no disk limits and no wall: %v; want the wall's failure, as before", err)
	}
	if n := strings.Count(logBuf.String(), `"msg":"prepare folder without a size limit"`); n != 1 || !strings.Contains(logBuf.String(), "no disk limits were asked for") {
		t.Errorf("%d records of an unbounded prepare folder, saying why; want 1:\n%s", n, logBuf.String())
	}
}

// fillScript writes argv[2] MiB into the new file argv[1], 1 MiB a write,
// and says how far it got.
const fillScript = `const fs=require('fs');const b=Buffer.alloc(1<<20,120);const fd=fs.openSync(process.argv[1],'w');let n=0;
try{for(;n<+process.argv[2];n++)fs.writeSync(fd,b)}catch(e){console.log('wrote '+n+' MiB: '+e.code);process.exit(1)}console.log('wrote '+n+' MiB')`

// measured is a wall's process that calls done once it has exited, while
// the install has not yet removed its folder.
type measured struct {
	Process
	done func()
}

func (m *measured) Wait() error {
	err := m.Process.Wait()
	m.done()
	return err
}

// allocatedOn is how many bytes what lies under dir takes on dir's file
// system (st_blocks), not counting other file systems mounted below it.
func allocatedOn(t *testing.T, dir string) int64 {
	t.Helper()
	var root unix.Stat_t
	if err := unix.Lstat(dir, &root); err != nil {
		t.Fatal(err)
	}
	var n int64
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return nil // gone meanwhile
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil {
			return nil
		}
		if st.Dev != root.Dev {
			return filepath.SkipDir
		}
		n += st.Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// checkNoPrepareLeft fails unless <state>/prepare is empty, nothing is
// mounted below state and no loop device is backed by a file below it.
func checkNoPrepareLeft(t *testing.T, state string) {
	t.Helper()
	if ents, err := os.ReadDir(filepath.Join(state, "prepare")); err != nil || len(ents) != 0 {
		t.Errorf("the prepare folders after the install: %d left (%v); want none", len(ents), err)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], state+"/") {
			t.Errorf("still mounted: %s", f[4])
		}
	}
	out, err := exec.Command("losetup", "-l", "-n", "-O", "NAME,BACK-FILE").CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, state+"/") {
			t.Errorf("a loop device still backed by the prepare folder: %s", l)
		}
	}
}

// outputLines are the lines of the prepare steps' output in the JSON log.
func outputLines(log string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, `"msg":"prepare output"`) {
			if i := strings.Index(l, `"line":`); i >= 0 {
				out = append(out, l[i+len(`"line":`):len(l)-1])
			}
		}
	}
	return out
}

// buildEntry builds toybox-entry as the Makefile does, into a folder the
// walls' uids may read.
func buildEntry(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "toybox-entry-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", append(append([]string{"build"}, testenv.EntryBuildFlags...), "-o", filepath.Join(dir, "toybox-entry"), "toybox/cmd/toybox-entry")...).CombinedOutput()
	if err != nil {
		t.Fatalf("building toybox-entry: %v\n%s", err, out)
	}
	return filepath.Join(dir, "toybox-entry")
}
