package packages

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

var launcherTests = []struct {
	name string
	argv []string
	want Spec
	err  string // a part of the error; "" for none
}{
	{"npx -y", []string{"npx", "-y", "@modelcontextprotocol/server-everything"}, Spec{Registry: NPM, Name: "@modelcontextprotocol/server-everything", Args: []string{}}, ""},
	{"npx version and args", []string{"/usr/bin/npx", "--yes", "pkg@1.2.3", "--port", "-p", "3"}, Spec{Registry: NPM, Name: "pkg", Version: "1.2.3", Args: []string{"--port", "-p", "3"}}, ""},
	{"npx range", []string{"npx", "pkg@^1.2"}, Spec{Registry: NPM, Name: "pkg", Version: "^1.2", Args: []string{}}, ""},
	{"npx tag", []string{"npx", "-y", "@s/p@latest"}, Spec{Registry: NPM, Name: "@s/p", Version: "latest", Args: []string{}}, ""},
	{"npx --", []string{"npx", "-y", "--", "pkg", "-x"}, Spec{Registry: NPM, Name: "pkg", Args: []string{"-x"}}, ""},
	{"npx -p", []string{"npx", "-p", "evil", "pkg"}, Spec{}, `"-p" is refused`},
	{"npx --package=", []string{"npx", "--package=evil", "pkg"}, Spec{}, `"--package" is refused`},
	{"npx -c", []string{"npx", "-c", "sh -c evil"}, Spec{}, `"-c" is refused`},
	{"npx --registry", []string{"npx", "--registry", "https://evil/", "pkg"}, Spec{}, `"--registry" is refused`},
	{"npx unknown", []string{"npx", "--frobnicate", "pkg"}, Spec{}, "is refused"},
	{"npx git", []string{"npx", "github:owner/repo"}, Spec{}, "not an npm package name"},
	{"npx url", []string{"npx", "https://evil.example/x.tgz"}, Spec{}, "not an npm package name"},
	{"npx path", []string{"npx", "./local"}, Spec{}, "not an npm package name"},
	{"npx alias", []string{"npx", "x@npm:evil@1"}, Spec{}, "not an npm package name"},
	{"npx none", []string{"npx", "-y"}, Spec{}, "names no package"},
	{"uvx", []string{"uvx", "mcp-server-fetch"}, Spec{Registry: PyPI, Name: "mcp-server-fetch", Args: []string{}}, ""},
	{"uvx pinned", []string{"uvx", "mcp_server.Fetch==2025.4.7", "--x"}, Spec{Registry: PyPI, Name: "mcp-server-fetch", Version: "2025.4.7", Args: []string{"--x"}}, ""},
	{"uvx @", []string{"uvx", "pkg@1.0"}, Spec{Registry: PyPI, Name: "pkg", Version: "1.0", Args: []string{}}, ""},
	{"uvx git", []string{"uvx", "--from", "git+https://github.com/o/r@0123456789abcdef0123456789abcdef01234567", "srv", "a"}, Spec{Registry: PyPI, Git: "git+https://github.com/o/r@0123456789abcdef0123456789abcdef01234567", Bin: "srv", Args: []string{"a"}}, ""},
	{"uvx --from=", []string{"uvx", "--from=pkg==1.0", "srv"}, Spec{Registry: PyPI, Name: "pkg", Version: "1.0", Bin: "srv", Args: []string{}}, ""},
	{"uvx git branch", []string{"uvx", "--from", "git+https://github.com/o/r@main", "srv"}, Spec{}, "full 40-hex commit"},
	{"uvx git short", []string{"uvx", "--from", "git+https://github.com/o/r@0123456", "srv"}, Spec{}, "full 40-hex commit"},
	{"uvx --with", []string{"uvx", "--with", "evil", "pkg"}, Spec{}, `"--with" is refused`},
	{"uvx --index-url", []string{"uvx", "--index-url=https://evil/", "pkg"}, Spec{}, `"--index-url" is refused`},
	{"uvx -i", []string{"uvx", "-i", "https://evil/", "pkg"}, Spec{}, `"-i" is refused`},
	{"uvx range", []string{"uvx", "pkg>=1"}, Spec{}, "not a PyPI project name"},
	{"uvx extras", []string{"uvx", "pkg[extra]"}, Spec{}, "not a PyPI project name"},
	{"uvx from twice", []string{"uvx", "--from", "a", "--from", "b", "c"}, Spec{}, "twice"},
	{"not a launcher", []string{"node", "server.js"}, Spec{}, "not a launcher"},
	{"empty", nil, Spec{}, "empty command"},
}

func TestParseLauncher(t *testing.T) {
	for _, tt := range launcherTests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseLauncher(tt.argv)
			if tt.err != "" {
				if err == nil || !errors.Is(err, ErrBadSpec) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseLauncher(%q) = %v; want an ErrBadSpec containing %q", tt.argv, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseLauncher(%q) = %v", tt.argv, err)
			}
			if got.Registry != tt.want.Registry || got.Name != tt.want.Name || got.Version != tt.want.Version || got.Git != tt.want.Git || got.Bin != tt.want.Bin || !slices.Equal(got.Args, tt.want.Args) {
				t.Errorf("ParseLauncher(%q) = %+v; want %+v", tt.argv, got, tt.want)
			}
		})
	}
}

// FuzzParseLauncher: whatever the line, an accepted spec names a valid
// package, and no option before it could change where code comes from.
func FuzzParseLauncher(f *testing.F) {
	for _, tt := range launcherTests {
		f.Add(strings.Join(tt.argv, "\x00"))
	}
	f.Fuzz(func(t *testing.T, line string) {
		argv := strings.Split(line, "\x00")
		sp, err := ParseLauncher(argv)
		if err != nil {
			return
		}
		switch sp.Registry {
		case NPM:
			if !ValidNPMName(sp.Name) {
				t.Fatalf("accepted npm name %q", sp.Name)
			}
		case PyPI:
			if sp.Git == "" && !pypiRe.MatchString(sp.Name) || sp.Git != "" && !gitRe.MatchString(sp.Git) {
				t.Fatalf("accepted %+v", sp)
			}
		default:
			t.Fatalf("registry %q", sp.Registry)
		}
		// Every option before the package is one of the harmless ones.
		for _, a := range argv[1:] {
			if a == "--" || !strings.HasPrefix(a, "-") {
				break
			}
			n := flagName(a)
			if !npxFlags[a] && !uvxFlags[a] && n != "--from" {
				t.Fatalf("accepted %q before the package in %q", a, argv)
			}
			if n == "--from" && a == "--from" {
				break // its value follows
			}
		}
		if _, err := ParsePackage(sp.String()); err != nil {
			t.Fatalf("ParsePackage(%q) of an accepted spec: %v", sp.String(), err)
		}
	})
}

func TestParsePackage(t *testing.T) {
	tests := []struct {
		in    string
		exact bool
		err   bool
	}{
		{"npm:@scope/name@1.2.3", true, false},
		{"npm:name", false, false},
		{"npm:name@latest", false, false},
		{"npm:name@~1.2", false, false},
		{"npm:Name@1.0.0", false, true},
		{"npm:name@", false, true},
		{"npm:../x", false, true},
		{"pypi:mcp-server-fetch==1.0", false, false},
		{"pypi:git+https://github.com/o/r@0123456789abcdef0123456789abcdef01234567", true, false},
		{"cargo:x", false, true},
		{"name@1.0.0", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			sp, err := ParsePackage(tt.in)
			if (err != nil) != tt.err {
				t.Fatalf("ParsePackage(%q) = %v; want error %v", tt.in, err, tt.err)
			}
			if err == nil && sp.Registry == NPM && sp.Exact() != tt.exact {
				t.Errorf("ParsePackage(%q).Exact() = %v; want %v", tt.in, sp.Exact(), tt.exact)
			}
		})
	}
}

func TestRange(t *testing.T) {
	tests := []struct {
		rng, v string
		want   bool
	}{
		{">=18", "20.20.2", true},
		{">=22", "20.20.2", false},
		{"^20.19.0 || >=22.12.0", "20.20.2", true},
		{"^20.19.0 || >=22.12.0", "21.0.0", false},
		{"~1.2.3", "1.2.9", true},
		{"~1.2.3", "1.3.0", false},
		{"^0.2.3", "0.2.9", true},
		{"^0.2.3", "0.3.0", false},
		{"^0.0.3", "0.0.4", false},
		{"1.x", "1.9.9", true},
		{"1.x", "2.0.0", false},
		{"*", "3.0.0", true},
		{"", "3.0.0", true},
		{"1.2.3 - 2.3", "2.3.9", true},
		{"1.2.3 - 2.3", "2.4.0", false},
		{">= 18.0.0", "18.0.0", true},
		{"<20", "19.9.9", true},
		{"<20", "20.0.0-rc.1", false},
		{">1.2", "1.2.9", false},
		{">1.2", "1.3.0", true},
		{"<=1.2", "1.2.9", true},
		{">=1.0.0", "2.0.0-beta.1", false},
		{">=2.0.0-alpha.1", "2.0.0-beta.1", true},
	}
	for _, tt := range tests {
		r, err := ParseRange(tt.rng)
		if err != nil {
			t.Fatalf("ParseRange(%q): %v", tt.rng, err)
		}
		v, err := ParseVersion(tt.v)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Satisfies(v); got != tt.want {
			t.Errorf("ParseRange(%q).Satisfies(%s) = %v; want %v", tt.rng, tt.v, got, tt.want)
		}
	}
}

func FuzzRange(f *testing.F) {
	for _, s := range []string{">=18", "^1.2.3 || ~2", "1.2.3 - 2", "1.x", "<=1.2", "", "*"} {
		f.Add(s, "1.2.3")
	}
	f.Fuzz(func(t *testing.T, rng, ver string) {
		r, err := ParseRange(rng)
		if err != nil {
			return
		}
		if v, err := ParseVersion(ver); err == nil {
			_ = r.Satisfies(v)
		}
	})
}
