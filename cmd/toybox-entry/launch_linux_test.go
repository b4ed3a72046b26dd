//go:build linux && cgo

package main

import (
	"errors"
	"flag"
	"io"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"toybox/vat/wall/entry"
)

// flagsRead is what a reading of the entry's flags yields: the fields of
// a launch that the parser sets, and nothing the launcher does after.
type flagsRead struct {
	ID, LogLevel                        string
	CapFD, AppCapFD, ProxyPort, FenceFD int
	RanFD                               int
	Forwards                            []entry.Forward
	Transparent                         bool
	ArgvAt                              int
	Argv                                []string
	MCP                                 bool
	MCPFD                               int
	MCPMode, MCPEra                     string
	MCPMaxProcs, MCPIdle                int
	ListenPort                          int
	ListenPath                          string
}

// readOf projects the launcher's reading onto flagsRead.
func readOf(l launch) flagsRead {
	r := flagsRead{
		ID: l.ID, LogLevel: l.LogLevel, CapFD: l.CapFD, AppCapFD: l.AppCapFD, ProxyPort: l.ProxyPort, FenceFD: l.FenceFD, RanFD: l.RanFD,
		Forwards: l.Forwards, Transparent: l.Transparent, ArgvAt: l.ArgvAt, Argv: l.Argv, MCPFD: -1,
	}
	if l.MCP != nil {
		r.MCP, r.MCPFD, r.MCPMode, r.MCPEra, r.MCPMaxProcs, r.MCPIdle = true, l.MCP.FD, l.MCP.Mode, l.MCP.Era, l.MCP.MaxProcs, l.MCP.IdleSeconds
	}
	if l.Listen != nil {
		r.ListenPort, r.ListenPath = l.Listen.Port, l.Listen.Path
	}
	return r
}

var errRefused = errors.New("refused")

// referenceFlags is the oracle te_parse is held to: the flag package's
// reading of args (the syntax the launcher documents), each value held
// to the rule the launcher's refusals state. It shares no code with
// te_parse.
func referenceFlags(args []string) (flagsRead, error) {
	r := flagsRead{LogLevel: "warn", CapFD: -1, AppCapFD: -1, FenceFD: -1, RanFD: -1, MCPFD: -1}
	mcpFlags := false
	fs := flag.NewFlagSet("toybox-entry", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// A plain decimal number: its own canonical text, from lo to hi.
	num := func(p *int, lo, hi int) func(string) error {
		return func(s string) error {
			n, err := strconv.Atoi(s)
			if err != nil || strconv.Itoa(n) != s || n < lo || n > hi {
				return errRefused
			}
			*p = n
			return nil
		}
	}
	oneOf := func(p *string, words ...string) func(string) error {
		return func(s string) error {
			for _, w := range words {
				if s == w {
					*p = s
					return nil
				}
			}
			return errRefused
		}
	}
	mcpFlag := func(set func(string) error) func(string) error {
		return func(s string) error {
			mcpFlags = true
			return set(s)
		}
	}
	fs.Func("vat", "", func(s string) error { r.ID = s; return nil })
	fs.Func("log-level", "", oneOf(&r.LogLevel, "debug", "info", "warn", "error"))
	fs.Func("cap-fd", "", num(&r.CapFD, 0, 1<<30))
	fs.Func("app-cap-fd", "", num(&r.AppCapFD, 0, 1<<30))
	fs.Func("task-fence-fd", "", num(&r.FenceFD, 3, 1<<30))
	fs.Func("ran-fd", "", num(&r.RanFD, 3, 1<<30))
	fs.Func("proxy-port", "", num(&r.ProxyPort, 0, 65535))
	fs.Func("forward", "", func(s string) error {
		f, err := referenceForward(s)
		if err != nil {
			return err
		}
		r.Forwards = append(r.Forwards, f)
		return nil
	})
	egress := ""
	fs.Func("egress-mode", "", oneOf(&egress, "transparent", "proxy"))
	mcp := ""
	fs.Func("mcp", "", oneOf(&mcp, "stdio"))
	fs.Func("mcp-fd", "", mcpFlag(num(&r.MCPFD, 3, 1<<30)))
	fs.Func("mcp-mode", "", mcpFlag(oneOf(&r.MCPMode, "session", "shared", "single")))
	fs.Func("mcp-era", "", mcpFlag(oneOf(&r.MCPEra, "legacy", "modern", "dual")))
	fs.Func("mcp-max-procs", "", mcpFlag(num(&r.MCPMaxProcs, 1, 4096)))
	fs.Func("mcp-idle-seconds", "", mcpFlag(num(&r.MCPIdle, 1, 1<<30)))
	fs.Func("listen-port", "", num(&r.ListenPort, 1, 65535))
	fs.Func("listen-path", "", func(s string) error {
		if !strings.HasPrefix(s, "/") || len(s) >= 108 { // sun_path holds 108 bytes with the NUL
			return errRefused
		}
		r.ListenPath = s
		return nil
	})
	if err := fs.Parse(args[1:]); err != nil {
		return r, err
	}
	r.Transparent = egress == "transparent"
	r.MCP = mcp == "stdio"
	r.Argv = fs.Args()
	r.ArgvAt = len(args) - len(r.Argv)
	listen := r.ListenPort > 0
	switch {
	case len(r.Forwards) > 256:
		return r, errors.New("too many --forward flags")
	case listen != (r.ListenPath != ""):
		return r, errors.New("--listen-port without --listen-path")
	case listen && (r.MCP || r.ListenPort == r.ProxyPort):
		return r, errors.New("--listen-port beside --mcp, or the proxy's port")
	case mcpFlags && !r.MCP:
		return r, errors.New("an --mcp-* flag without --mcp")
	case r.MCP && (r.MCPFD < 0 || r.MCPFD == r.CapFD || r.MCPFD == r.AppCapFD):
		return r, errors.New("--mcp-fd missing or a capability's")
	case r.AppCapFD < 3 || r.AppCapFD == r.CapFD:
		return r, errors.New("--app-cap-fd missing or --cap-fd")
	case r.FenceFD >= 0 && (r.FenceFD == r.CapFD || r.FenceFD == r.AppCapFD || r.FenceFD == r.MCPFD):
		return r, errors.New("--task-fence-fd is another flag's")
	case r.RanFD >= 0 && (r.RanFD == r.CapFD || r.RanFD == r.AppCapFD || r.RanFD == r.MCPFD || r.RanFD == r.FenceFD):
		return r, errors.New("--ran-fd is another flag's")
	case len(r.Argv) == 0:
		return r, errors.New("no command")
	}
	for _, f := range r.Forwards {
		if listen && int(f.Port) == r.ListenPort {
			return r, errors.New("--listen-port is a forwarded port")
		}
	}
	return r, nil
}

// referenceForward reads PORT=HOST:PORT with the net package.
func referenceForward(s string) (entry.Forward, error) {
	portText, hostPort, ok := strings.Cut(s, "=")
	if !ok {
		return entry.Forward{}, errRefused
	}
	var port, target int
	host, targetText, err := net.SplitHostPort(hostPort)
	if err != nil || num16(portText, &port) != nil || num16(targetText, &target) != nil || !entry.ForwardHostOK(host) {
		return entry.Forward{}, errRefused
	}
	if !strings.HasPrefix(hostPort, "[") && strings.Contains(host, ":") {
		return entry.Forward{}, errRefused // SplitHostPort reads "::1:5" as no host; an IPv6 host needs brackets
	}
	return entry.Forward{Port: uint16(port), Host: host, TargetPort: uint16(target)}, nil
}

func num16(s string, p *int) error {
	n, err := strconv.Atoi(s)
	if err != nil || strconv.Itoa(n) != s || n < 1 || n > 65535 {
		return errRefused
	}
	*p = n
	return nil
}

// argvOf splits a fuzz input into an argv: NUL ends each argument.
func argvOf(s string) []string {
	return append([]string{"toybox-entry"}, strings.Split(s, "\x00")...)
}

// compareFlags fails t when the launcher and the reference read args
// differently: one accepts what the other refuses, or they read other
// values.
func compareFlags(t *testing.T, args []string) {
	t.Helper()
	l, ok := parseLaunch(args)
	want, err := referenceFlags(args)
	if ok != (err == nil) {
		t.Fatalf("args %q: the launcher accepts %v (%s), the flag package %v (%v)", args, ok, l.Why, err == nil, err)
	}
	if !ok {
		if l.Why == "" {
			t.Fatalf("args %q: the launcher refused them without a reason", args)
		}
		return
	}
	if got := readOf(l); !reflect.DeepEqual(got, want) {
		t.Fatalf("args %q:\nthe launcher read %+v\nthe flag package %+v", args, got, want)
	}
	for _, f := range l.Forwards {
		if f.Port == 0 || f.TargetPort == 0 || !entry.ForwardHostOK(f.Host) {
			t.Fatalf("args %q: the launcher accepted the forward %+v", args, f)
		}
	}
}

// launcherFlagSeeds are argvs (after the program's name) both readings
// must agree on: the launch tests' flags, and the edges of the syntax.
var launcherFlagSeeds = [][]string{
	{"--vat", "v", "--app-cap-fd", "3", "--", "/app"},
	{"-vat=v", "--log-level=debug", "-app-cap-fd=3", "--", "/app"},
	{"--app-cap-fd", "3", "/app", "--x"},
	{"--app-cap-fd", "3", "-", "x"},
	{"--app-cap-fd", "3", "--", "--", "x"},
	{"--cap-fd", "4", "--proxy-port", "0", "--forward", "5432=db.lan:5432", "--forward", "5433=[::1]:5433", "--app-cap-fd", "3", "--", "/app"},
	{"--cap-fd", "4", "--proxy-port", "39080", "--egress-mode", "transparent", "--app-cap-fd", "3", "--task-fence-fd", "5", "--ran-fd", "6", "--", "/app", "a"},
	{"--mcp", "stdio", "--mcp-fd", "5", "--mcp-mode", "shared", "--mcp-era", "dual", "--mcp-max-procs", "8", "--mcp-idle-seconds", "600", "--app-cap-fd", "3", "--", "/app"},
	{"--listen-port", "3000", "--listen-path", "/run/toybox/app.sock", "--app-cap-fd", "3", "--", "/app"},
	{"--log-level", "INFO", "--app-cap-fd", "3", "--", "/app"},
	{"--app-cap-fd", "03", "--", "/app"},
	{"--app-cap-fd", "+3", "--", "/app"},
	{"--app-cap-fd", "0x3", "--", "/app"},
	{"--app-cap-fd", "3", "--bogus", "1", "--", "/app"},
	{"---vat", "v", "--app-cap-fd", "3", "--", "/app"},
	{"-=v", "--app-cap-fd", "3", "--", "/app"},
	{"-h", "--app-cap-fd", "3", "--", "/app"},
	{"--app-cap-fd", "3", "--vat"},
	{"--vat", "--app-cap-fd", "3", "--", "/app"},
	{"--cap-fd", "3", "--app-cap-fd", "3", "--", "/app"},
	{"--cap-fd", "4", "--forward", "80=bad host:1", "--app-cap-fd", "3", "--", "/app"},
	{"--cap-fd", "4", "--forward", "80=::1:5", "--app-cap-fd", "3", "--", "/app"},
	{"--cap-fd", "4", "--forward", "80=[::1]x:5", "--app-cap-fd", "3", "--", "/app"},
	{"--cap-fd", "4", "--forward", "80=db.lan", "--app-cap-fd", "3", "--", "/app"},
	{"--cap-fd", "4", "--forward", "80=db.lan:0", "--app-cap-fd", "3", "--", "/app"},
	{"--cap-fd", "4", "--forward", "+80=db.lan:1", "--app-cap-fd", "3", "--", "/app"},
	{"--mcp", "http", "--mcp-fd", "4", "--app-cap-fd", "3", "--", "/app"},
	{"--mcp-fd", "4", "--app-cap-fd", "3", "--", "/app"},
	{"--mcp", "stdio", "--mcp-fd", "3", "--app-cap-fd", "3", "--", "/app"},
	{"--listen-port", "3000", "--app-cap-fd", "3", "--", "/app"},
	{"--listen-port", "3000", "--listen-path", "x.sock", "--app-cap-fd", "3", "--", "/app"},
	{"--listen-port", "3000", "--listen-path", "/" + strings.Repeat("a", 107), "--app-cap-fd", "3", "--", "/app"},
	{"--cap-fd", "4", "--forward", "5432=db.lan:5432", "--listen-port", "5432", "--listen-path", "/x", "--app-cap-fd", "3", "--", "/app"},
	{"--task-fence-fd", "3", "--app-cap-fd", "3", "--", "/app"},
	{"--ran-fd", "3", "--app-cap-fd", "3", "--", "/app"},
	{"--ran-fd", "5", "--task-fence-fd", "5", "--app-cap-fd", "3", "--", "/app"},
	{"--ran-fd", "5", "--mcp", "stdio", "--mcp-fd", "5", "--app-cap-fd", "3", "--", "/app"},
	{"--app-cap-fd", "3"},
	{},
}

// boundarySeeds puts each value flag's edges (the numbers about each
// limit, each word and its near misses) in an argv that is otherwise a
// launch's. Random mutation rarely finds an edge such as a limit of 1.
func boundarySeeds() [][]string {
	tail := []string{"--app-cap-fd", "3", "--", "/app"}
	mcp := []string{"--mcp", "stdio", "--mcp-fd", "5"}
	var seeds [][]string
	for _, v := range []string{"-1", "0", "1", "2", "3", "4", "4096", "4097", "65535", "65536", "1073741824", "1073741825", "9999999999", "99999999999"} {
		for _, args := range [][]string{
			{"--cap-fd", v},
			{"--task-fence-fd", v},
			{"--ran-fd", v},
			{"--proxy-port", v},
			{"--forward", v + "=h:1"},
			{"--forward", "1=h:" + v},
			{"--listen-port", v, "--listen-path", "/x"},
			append(slices.Clone(mcp), "--mcp-max-procs", v),
			append(slices.Clone(mcp), "--mcp-idle-seconds", v),
			{"--mcp", "stdio", "--mcp-fd", v},
		} {
			seeds = append(seeds, append(args, tail...))
		}
		seeds = append(seeds, []string{"--app-cap-fd", v, "--", "/app"})
	}
	for flag, words := range map[string][]string{
		"--log-level":   {"debug", "info", "warn", "error"},
		"--egress-mode": {"transparent", "proxy"},
		"--mcp":         {"stdio"},
		"--mcp-mode":    {"session", "shared", "single"},
		"--mcp-era":     {"legacy", "modern", "dual"},
	} {
		for _, w := range words {
			for _, v := range []string{w, strings.ToUpper(w), w + "x", w[:len(w)-1], ""} {
				args := []string{flag, v}
				if strings.HasPrefix(flag, "--mcp-") {
					args = append(slices.Clone(mcp), args...)
				}
				seeds = append(seeds, append(args, tail...))
			}
		}
	}
	return seeds
}

// The launcher reads the flags once, before the Go runtime starts, and
// main takes its reading. So the launcher alone decides what the flags
// say. This holds it to the flag package's syntax, which the usage
// documents: a launcher that read them otherwise would run an app the
// supervisor did not ask for (or refuse one it did).
func FuzzLauncherFlags(f *testing.F) {
	for _, s := range launcherFlagSeeds {
		f.Add(strings.Join(s, "\x00"))
	}
	for _, s := range boundarySeeds() {
		f.Add(strings.Join(s, "\x00"))
	}
	f.Fuzz(func(t *testing.T, s string) {
		compareFlags(t, argvOf(s))
	})
}

func TestLauncherForwardFlag(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want entry.Forward
		ok   bool
	}{
		{"ipv4", "5432=127.0.0.1:5432", entry.Forward{Port: 5432, Host: "127.0.0.1", TargetPort: 5432}, true},
		{"name", "8080=db.lan:80", entry.Forward{Port: 8080, Host: "db.lan", TargetPort: 80}, true},
		{"ipv6", "9000=[::1]:9001", entry.Forward{Port: 9000, Host: "::1", TargetPort: 9001}, true},
		{"no equals", "5432", entry.Forward{}, false},
		{"port zero", "0=127.0.0.1:1", entry.Forward{}, false},
		{"target port zero", "1=127.0.0.1:0", entry.Forward{}, false},
		{"port too big", "70000=127.0.0.1:1", entry.Forward{}, false},
		{"no host", "1=:2", entry.Forward{}, false},
		{"no target port", "1=127.0.0.1", entry.Forward{}, false},
		{"ipv6 without brackets", "1=::1:2", entry.Forward{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"toybox-entry", "--forward", tt.in, "--app-cap-fd", "3", "--", "/app"}
			compareFlags(t, args)
			l, ok := parseLaunch(args)
			if ok != tt.ok {
				t.Fatalf("--forward %q: accepted %v (%s); want %v", tt.in, ok, l.Why, tt.ok)
			}
			if tt.ok && (len(l.Forwards) != 1 || l.Forwards[0] != tt.want) {
				t.Errorf("--forward %q = %+v; want %+v", tt.in, l.Forwards, tt.want)
			}
		})
	}
}

// A refusal names the argument it is about.
func TestLauncherNamesTheArgument(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"toybox-entry", "--app-cap-fd", "3", "--bogus", "1", "--", "/app"}, `an unknown flag (argument 3, "--bogus")`},
		{[]string{"toybox-entry", "--proxy-port=x", "--app-cap-fd", "3", "--", "/app"}, `--proxy-port is not a plain decimal port (argument 1, "--proxy-port=x")`},
		{[]string{"toybox-entry", "--app-cap-fd", "3"}, "no command"},
	} {
		l, ok := parseLaunch(tt.args)
		if ok {
			t.Fatalf("%q: accepted", tt.args)
		}
		_, err := l.check()
		if err == nil || !strings.HasSuffix(err.Error(), tt.want) {
			t.Errorf("%q: %v; want %s", tt.args, err, tt.want)
		}
	}
}
