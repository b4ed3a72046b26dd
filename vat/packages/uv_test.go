package packages

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"toybox/tests/testenv"
)

const (
	hashA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	hashB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func TestFromRequirements(t *testing.T) {
	git := "git+https://github.com/o/r@0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		name, in string
		want     []Package
		err      string
	}{
		{
			name: "hashed, continued lines",
			in:   "mcp-server-fetch==2025.4.7 \\\n    --hash=sha256:" + hashA + " \\\n    --hash=sha256:" + hashB + "\n# via x\nHTTPX==0.28.1 --hash=sha256:" + hashA + "\n",
			want: []Package{
				{Path: "site/httpx", Name: "httpx", Version: "0.28.1", Integrity: "sha256:" + hashA},
				{Path: "site/mcp-server-fetch", Name: "mcp-server-fetch", Version: "2025.4.7", Integrity: "sha256:" + hashA + " sha256:" + hashB},
			},
		},
		{name: "no hash", in: "a==1.0\n", err: "no sha256 hash"},
		{name: "a url", in: "a @ https://evil.example/a.whl --hash=sha256:" + hashA + "\n", err: "is not one name==version"},
		{name: "an editable", in: "-e ./x\n", err: "is not one name==version"},
		{name: "a range", in: "a>=1 --hash=sha256:" + hashA + "\n", err: "is not one name==version"},
		{name: "the git source asked", in: "srv @ " + git + "\n", want: []Package{{Path: "site/srv", Name: "srv", Resolved: git}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := ""
			if strings.Contains(tt.in, git) {
				g = git
			}
			got, err := FromRequirements([]byte(tt.in), g)
			if tt.err != "" {
				if !errors.Is(err, ErrBadLock) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("FromRequirements(%q) = %v; want ErrBadLock naming %q", tt.in, err, tt.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("FromRequirements(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseConsoleScripts(t *testing.T) {
	in := "[gui_scripts]\ng = m:gui\n\n[console_scripts]\nmcp-server-fetch = mcp_server_fetch:main\nx=pkg.cli:app.run [extra]\nbad = not a script\n"
	got := parseConsoleScripts([]byte(in))
	want := map[string]string{"mcp-server-fetch": "mcp_server_fetch:main", "x": "pkg.cli:app.run"}
	if len(got) != len(want) || got["mcp-server-fetch"] != want["mcp-server-fetch"] || got["x"] != want["x"] {
		t.Errorf("parseConsoleScripts = %v; want %v", got, want)
	}
}

// fakeUV stands in for uv, which this machine does not have: it records
// each step's argv and writes what uv would (requirements.txt, then the
// installed site folder of one wheel with a console script).
type fakeUV struct {
	steps [][]string
	reqs  string
}

func (f *fakeUV) run(_ context.Context, step string, argv []string, env map[string]string) error {
	f.steps = append(f.steps, argv)
	if env["UV_NO_CONFIG"] != "1" || env["UV_PYTHON_DOWNLOADS"] != "never" {
		return errors.New("uv would read the host's config or download a Python")
	}
	switch step {
	case "resolve":
		out := argv[slices.Index(argv, "--output-file")+1]
		return os.WriteFile(out, []byte(f.reqs), 0o644)
	case "install":
		site := argv[slices.Index(argv, "--target")+1]
		for p, b := range map[string]string{
			"hello_mcp/__init__.py":                      "import sys\ndef main():\n    print('hello from', sys.argv[0], sys.argv[1:])\n    return 0\n",
			"hello_mcp-1.2.0.dist-info/entry_points.txt": "[console_scripts]\nhello-mcp = hello_mcp:main\n",
			"bin/hello-mcp":                              "#!/prepare/wall/python\n",
		} {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(site, p)), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(site, p), []byte(b), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// TestPrepareUV runs the uv path with fakeUV in uv's place: the argv of
// each step (hashes required, nothing built, the index only, the host's
// python), the lock, and a launcher that the host's real python runs.
func TestPrepareUV(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		testenv.Unavailable(t, "no python3 here (make deps installs it)")
	}
	f := &fakeUV{reqs: "hello-mcp==1.2.0 --hash=sha256:" + hashA + "\n"}
	cfg := UVConfig{Index: "http://127.0.0.1:9/simple", UV: "/usr/bin/uv", Python: python, PythonVersion: "3.11.7"}
	sp, err := ParseLauncher([]string{"uvx", "hello-mcp@1.2.0", "--flag"})
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	tree, lock, err := PrepareUV(context.Background(), cfg, f.run, work, Request{Spec: sp, MCP: json.RawMessage(`{"transport":"stdio"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.steps) != 2 {
		t.Fatalf("%d steps; want resolve and install", len(f.steps))
	}
	for i, want := range [][]string{
		{"/usr/bin/uv", "pip", "compile", "--no-build", "--generate-hashes", "--python", python, "--index-url", "http://127.0.0.1:9/simple/", "--no-config"},
		{"/usr/bin/uv", "pip", "install", "--no-build", "--require-hashes", "--no-deps", "--target", "--python", python, "--index-url", "http://127.0.0.1:9/simple/", "--no-config"},
	} {
		for _, a := range want {
			if !slices.Contains(f.steps[i], a) {
				t.Errorf("step %d argv %q lacks %q", i, f.steps[i], a)
			}
		}
	}
	if lock.Name != "hello-mcp" || lock.Version != "1.2.0" || lock.Python == nil || lock.Python.Path != python || len(lock.Packages) != 1 {
		t.Errorf("lock = %+v", lock)
	}
	wantCmd := []string{python, "-I", "-B", EntryPath, "--flag"}
	if !slices.Equal(lock.Command, wantCmd) {
		t.Errorf("command = %q; want %q", lock.Command, wantCmd)
	}
	if _, err := os.Lstat(filepath.Join(tree, "site", "bin")); err == nil {
		t.Errorf("site/bin (scripts naming the prepare wall's python) is kept")
	}
	var m map[string]any
	if b, err := os.ReadFile(filepath.Join(tree, "manifest.json")); err != nil || json.Unmarshal(b, &m) != nil || m["mcp"] == nil {
		t.Errorf("manifest.json: %s %v", b, err)
	}
	if _, err := Manifest(tree); err != nil {
		t.Errorf("the tree does not make a bundle: %v", err)
	}
	// The launcher itself, run as the wall runs it (the bundle is the
	// working folder; -I ignores PYTHONPATH and the user's site).
	cmd := exec.Command(lock.Command[0], lock.Command[1:]...)
	cmd.Dir = tree
	cmd.Env = []string{"PYTHONPATH=/nonexistent"}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hello from hello_mcp ['--flag']") {
		t.Errorf("running the launcher: %v %s", err, out)
	}
}

// TestPrepareUVRefusals: a git source builds (runs its code) only when
// allowed; a lock without hashes and an npm spec are refused.
func TestPrepareUVRefusals(t *testing.T) {
	cfg := UVConfig{UV: "/usr/bin/uv", Python: "/usr/bin/python3"}
	git, err := ParseLauncher([]string{"uvx", "--from", "git+https://github.com/o/r@0123456789abcdef0123456789abcdef01234567", "srv"})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeUV{}
	if _, _, err := PrepareUV(context.Background(), cfg, f.run, t.TempDir(), Request{Spec: git}); !errors.Is(err, ErrScripts) || len(f.steps) != 0 {
		t.Errorf("a git source, not allowed: %v after %d steps; want ErrScripts before any", err, len(f.steps))
	}
	f = &fakeUV{reqs: "srv @ git+https://github.com/o/r@0123456789abcdef0123456789abcdef01234567\n"}
	_, _, err = PrepareUV(context.Background(), cfg, f.run, t.TempDir(), Request{Spec: git, Allow: []string{"srv"}})
	if len(f.steps) == 0 || slices.Contains(f.steps[0], "--no-build") {
		t.Errorf("an allowed git source: steps %q; want a resolve that may build", f.steps)
	}
	// It installed; fakeUV's wheel has no script named srv.
	if len(f.steps) != 2 || err == nil || !strings.Contains(err.Error(), `no console script "srv"`) {
		t.Errorf("an allowed git source: %v after %d steps; want both steps, then no console script \"srv\"", err, len(f.steps))
	}
	f = &fakeUV{reqs: "hello-mcp==1.2.0\n"}
	sp, _ := ParsePackage("pypi:hello-mcp==1.2.0")
	if _, _, err := PrepareUV(context.Background(), cfg, f.run, t.TempDir(), Request{Spec: sp}); !errors.Is(err, ErrBadLock) || len(f.steps) != 1 {
		t.Errorf("a lock without hashes: %v after %d steps; want ErrBadLock before install", err, len(f.steps))
	}
	np, _ := ParsePackage("npm:x@1.0.0")
	if _, _, err := PrepareUV(context.Background(), cfg, f.run, t.TempDir(), Request{Spec: np}); !errors.Is(err, ErrBadSpec) {
		t.Errorf("an npm spec: %v; want ErrBadSpec", err)
	}
}

// TestPrepareUVBuildStaysInTree: a git source's build code runs inside
// the prepare wall, which holds work read-write. Whatever it leaves in
// work's tree, toybox must neither write nor delete outside it: a tree or
// site folder replaced by a link to a host folder is refused, and that
// folder is left as it was.
func TestPrepareUVBuildStaysInTree(t *testing.T) {
	git := "git+https://github.com/o/r@0123456789abcdef0123456789abcdef01234567"
	sp, err := ParseLauncher([]string{"uvx", "--from", git, "hello-mcp"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		step string
		// plant runs after the fake uv's step, as the build's code would.
		plant func(work, victim string) error
	}{
		{
			name: "site becomes a link",
			step: "install",
			plant: func(work, victim string) error {
				site := filepath.Join(work, "tree", "site")
				if err := os.RemoveAll(site); err != nil {
					return err
				}
				return os.Symlink(victim, site)
			},
		},
		{
			name: "tree becomes a link",
			step: "install",
			plant: func(work, victim string) error {
				tree := filepath.Join(work, "tree")
				if err := os.RemoveAll(tree); err != nil {
					return err
				}
				return os.Symlink(victim, tree)
			},
		},
		{
			name: "tree is a link before install",
			step: "resolve",
			plant: func(work, victim string) error {
				return os.Symlink(victim, filepath.Join(work, "tree"))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			work, victim := t.TempDir(), t.TempDir()
			for _, p := range []string{"bin/keep", "site/bin/keep"} {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(victim, p)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(victim, p), []byte("the host's"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			before := listTree(t, victim)
			f := &fakeUV{reqs: "hello-mcp @ " + git + "\n"}
			run := func(ctx context.Context, step string, argv []string, env map[string]string) error {
				if err := f.run(ctx, step, argv, env); err != nil {
					return err
				}
				if step == tt.step {
					return tt.plant(work, victim)
				}
				return nil
			}
			cfg := UVConfig{UV: "/usr/bin/uv", Python: "/usr/bin/python3", PythonVersion: "3.11.7"}
			_, _, err := PrepareUV(context.Background(), cfg, run, work, Request{Spec: sp, Allow: []string{"hello-mcp"}, MCP: json.RawMessage(`{"transport":"stdio"}`)})
			if !errors.Is(err, ErrTreeReplaced) {
				t.Errorf("PrepareUV = %v; want ErrTreeReplaced", err)
			}
			if after := listTree(t, victim); !slices.Equal(after, before) {
				t.Errorf("the host folder holds %q; want %q as it was", after, before)
			}
		})
	}
}

// listTree lists every path below dir.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		out = append(out, strings.TrimPrefix(p, dir))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPrepareUVOutputBounded: uv (and a build the owner allowed) writes
// the site folder itself, not through Unpack. What it leaves is held to
// the tree's limits before toybox lists and bundles it.
func TestPrepareUVOutputBounded(t *testing.T) {
	f := &fakeUV{reqs: "hello-mcp==1.2.0 --hash=sha256:" + hashA + "\n"}
	run := func(ctx context.Context, step string, argv []string, env map[string]string) error {
		if err := f.run(ctx, step, argv, env); err != nil || step != "install" {
			return err
		}
		site := argv[slices.Index(argv, "--target")+1]
		for i := range 40 {
			if err := os.WriteFile(filepath.Join(site, "hello_mcp", "f"+strconv.Itoa(i)), []byte("x"), 0o644); err != nil {
				return err
			}
		}
		return nil
	}
	sp, err := ParseLauncher([]string{"uvx", "hello-mcp@1.2.0"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := UVConfig{UV: "/usr/bin/uv", Python: "/usr/bin/python3", PythonVersion: "3.11.7", Limits: Limits{Entries: 16}}
	_, _, err = PrepareUV(context.Background(), cfg, run, t.TempDir(), Request{Spec: sp})
	if !errors.Is(err, ErrBadTarball) || !strings.Contains(err.Error(), "more than 16 entries") {
		t.Errorf("an install of 40 files into a tree of at most 16 entries: %v; want ErrBadTarball naming the limit", err)
	}
}

// TestPrepareUVReadsOnlyFiles: what the prepare steps leave in work is
// read by the supervisor, outside the wall. A git source's build runs in
// both steps and can leave a link or a fifo where uv's output was: toybox
// must read neither a host file through the link nor block for good on
// the fifo.
func TestPrepareUVReadsOnlyFiles(t *testing.T) {
	git := "git+https://github.com/o/r@0123456789abcdef0123456789abcdef01234567"
	sp, err := ParseLauncher([]string{"uvx", "--from", git, "hello-mcp"})
	if err != nil {
		t.Fatal(err)
	}
	host := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(host, []byte("hello-mcp @ "+git+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, step string
		file       func(work string) string // the file the build replaces
		fifo       bool                     // a fifo, else a link to host
	}{
		{name: "requirements.txt a link to a host file", step: "resolve", file: func(w string) string { return filepath.Join(w, "requirements.txt") }},
		{name: "requirements.txt a fifo", step: "resolve", file: func(w string) string { return filepath.Join(w, "requirements.txt") }, fifo: true},
		{name: "entry_points.txt a fifo", step: "install", fifo: true, file: func(w string) string {
			return filepath.Join(w, "tree", "site", "hello_mcp-1.2.0.dist-info", "entry_points.txt")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			work := t.TempDir()
			f := &fakeUV{reqs: "junk\n"} // what uv wrote; the build replaces it
			if tt.step == "install" {
				f.reqs = "hello-mcp @ " + git + "\n"
			}
			run := func(ctx context.Context, step string, argv []string, env map[string]string) error {
				if err := f.run(ctx, step, argv, env); err != nil || step != tt.step {
					return err
				}
				p := tt.file(work)
				if err := os.Remove(p); err != nil {
					return err
				}
				if tt.fifo {
					return unix.Mkfifo(p, 0o644)
				}
				return os.Symlink(host, p)
			}
			cfg := UVConfig{UV: "/usr/bin/uv", Python: "/usr/bin/python3", PythonVersion: "3.11.7"}
			done := make(chan error, 1)
			go func() {
				_, _, err := PrepareUV(context.Background(), cfg, run, work, Request{Spec: sp, Allow: []string{"hello-mcp"}, MCP: json.RawMessage(`{"transport":"stdio"}`)})
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, ErrTreeReplaced) {
					t.Errorf("PrepareUV = %v; want ErrTreeReplaced", err)
				}
			case <-time.After(10 * time.Second):
				// Let the blocked read end: a writer opens and closes.
				if w, err := os.OpenFile(tt.file(work), os.O_WRONLY, 0); err == nil {
					w.Close()
				}
				t.Fatalf("PrepareUV still reading %s after 10s", tt.file(work))
			}
		})
	}
}
