package owner

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

const toy = 64000

func proc(pid int, exe, cwd string, argv ...string) Proc {
	return Proc{PID: pid, UIDs: [4]int{toy, toy, toy, toy}, Exe: exe, Cwd: cwd, Argv: argv, Comm: "x"}
}

func TestJudge(t *testing.T) {
	target := netip.MustParseAddrPort("127.0.0.1:5432")
	base := func() Facts {
		return Facts{
			Target: target, Vat: "myvat", OwnerTyped: true, ToyboxUID: toy,
			OwnRoots:      []string{"/usr/local/lib/toybox", "/var/lib/toybox"},
			InstalledVats: []string{"myvat", "other-vat"},
			Exceptions:    []string{"tts"},
		}
	}
	toyL := l("127.0.0.1", 5432, toy, 10)
	rootL := l("0.0.0.0", 5432, 0, 20)
	svc := proc(100, "/opt/pg/bin/postgres", "/home/me", "postgres", "-D", "/home/me/pg")
	ctr := func(name, project string, ip string) Container {
		c := Container{ID: "id-" + name, Name: name, Publish: []Published{{IP: ip, Port: 5432, Proto: "tcp"}}}
		if project != "" {
			c.Labels = map[string]string{ComposeProjectLabel: project}
		}
		return c
	}
	tests := []struct {
		name   string
		edit   func(*Facts)
		allow  bool
		reason string // a substring of the reason
	}{
		{"not loopback", func(f *Facts) { f.Target = netip.MustParseAddrPort("192.0.2.1:5432") }, false, "192.0.2.1:5432 is neither a loopback address nor one of this host's"},
		{"this host's own address", func(f *Facts) {
			f.Target = netip.MustParseAddrPort("192.0.2.1:5432")
			f.OwnAddr = true
			f.Listeners = []Listener{l("0.0.0.0", 5432, toy, 10)}
			f.Holders = map[uint64][]Proc{10: {svc}}
		}, true, "192.0.2.1:5432 is held by pid 100"},
		{"proc unreadable", func(f *Facts) { f.ProcErr = errors.New("permission denied") }, false, "cannot tell who listens on 127.0.0.1:5432: permission denied"},
		{"nothing listening", func(f *Facts) {}, false, "nothing listens on 127.0.0.1:5432"},
		{"own service, owner typed", func(f *Facts) {
			f.Listeners = []Listener{toyL}
			f.Holders = map[uint64][]Proc{10: {svc}}
		}, true, `pid 100 (/opt/pg/bin/postgres) of the toybox user, outside toybox's own tree: vat "myvat"'s own service`},
		{"own service, manifest default", func(f *Facts) {
			f.OwnerTyped = false
			f.Listeners = []Listener{toyL}
			f.Holders = map[uint64][]Proc{10: {svc}}
		}, false, "never a manifest default"},
		{"own service, handle of no vat", func(f *Facts) {
			f.Vat = ""
			f.Listeners = []Listener{toyL}
			f.Holders = map[uint64][]Proc{10: {svc}}
		}, false, "a handle of no vat"},
		{"supervisor", func(f *Facts) {
			f.Listeners = []Listener{toyL}
			f.Holders = map[uint64][]Proc{10: {proc(123, "/usr/local/bin/toybox", "/", "toybox", "serve")}}
		}, false, "127.0.0.1:5432 is held by the toybox supervisor (pid 123)"},
		{"supervisor of another checkout by argv0", func(f *Facts) {
			f.Listeners = []Listener{toyL}
			f.Holders = map[uint64][]Proc{10: {proc(124, "/home/dev/other/bin/x", "/home/dev", "/home/dev/other/bin/toybox", "serve")}}
		}, false, "the toybox supervisor (pid 124)"},
		{"switchboard by exe", func(f *Facts) {
			f.Listeners = []Listener{toyL}
			f.Holders = map[uint64][]Proc{10: {proc(125, "/opt/elsewhere/switchboard", "/", "sb")}}
		}, false, "the toybox switchboard (pid 125)"},
		{"switchboard run by an interpreter", func(f *Facts) {
			f.Listeners = []Listener{toyL}
			f.Holders = map[uint64][]Proc{10: {proc(126, "/usr/bin/python3", "/", "python3", "/srv/switchboard")}}
		}, false, "the toybox switchboard (pid 126)"},
		{"bwrap by comm", func(f *Facts) {
			p := proc(127, "/usr/bin/x", "/", "x")
			p.Comm = "bwrap"
			f.Listeners = []Listener{toyL}
			f.Holders = map[uint64][]Proc{10: {p}}
		}, false, "bubblewrap (a wall's own process) (pid 127)"},
		{"toybox-entry", func(f *Facts) {
			f.Listeners = []Listener{toyL}
			f.Holders = map[uint64][]Proc{10: {proc(128, "/usr/local/bin/toybox-entry", "/", "toybox-entry")}}
		}, false, "toybox-entry (a wall's own process) (pid 128)"},
		{"shared after fork with the supervisor", func(f *Facts) {
			f.Listeners = []Listener{toyL}
			f.Holders = map[uint64][]Proc{10: {svc, proc(129, "/usr/local/bin/toybox", "/", "toybox", "serve")}}
		}, false, "the toybox supervisor (pid 129)"},
		{"no process holds it", func(f *Facts) { f.Listeners = []Listener{toyL} }, false, "no visible process holds"},
		{"a toybox-user process cannot be inspected", func(f *Facts) {
			f.Listeners = []Listener{toyL}
			f.Holders = map[uint64][]Proc{10: {svc}}
			f.Hidden = map[int]int{555: toy}
		}, false, "pid 555 of that user cannot be inspected"},
		{"a process of unknown user cannot be inspected", func(f *Facts) {
			f.Listeners = []Listener{toyL}
			f.Holders = map[uint64][]Proc{10: {svc}}
			f.Hidden = map[int]int{556: -1}
		}, false, "pid 556, of an unknown user, cannot be inspected"},
		{"hidden process of another user does not block", func(f *Facts) {
			f.Listeners = []Listener{toyL}
			f.Holders = map[uint64][]Proc{10: {svc}}
			f.Hidden = map[int]int{1: 0}
		}, true, "own service"},
		{"holder's exe unreadable", func(f *Facts) {
			p := svc
			p.Exe, p.Err = "", "executable: permission denied"
			f.Listeners = []Listener{toyL}
			f.Holders = map[uint64][]Proc{10: {p}}
		}, false, "cannot be inspected: executable: permission denied"},
		{"holder running as another uid", func(f *Facts) {
			p := svc
			p.UIDs[1] = 0
			f.Listeners = []Listener{toyL}
			f.Holders = map[uint64][]Proc{10: {p}}
		}, false, "running as uid 0, not the toybox user"},
		{"exe under the install dir", func(f *Facts) {
			f.Listeners = []Listener{toyL}
			f.Holders = map[uint64][]Proc{10: {proc(130, "/usr/local/lib/toybox/helper", "/", "helper")}}
		}, false, "whose executable /usr/local/lib/toybox/helper lies under toybox's own /usr/local/lib/toybox"},
		{"cwd under the state dir", func(f *Facts) {
			f.Listeners = []Listener{toyL}
			f.Holders = map[uint64][]Proc{10: {proc(131, "/usr/bin/python3", "/var/lib/toybox/run/x", "python3", "-m", "http.server")}}
		}, false, "working directory /var/lib/toybox/run/x"},
		{"argv flag value under the state dir", func(f *Facts) {
			f.Listeners = []Listener{toyL}
			f.Holders = map[uint64][]Proc{10: {proc(132, "/usr/bin/x", "/", "x", "--data=/var/lib/toybox/data/v")}}
		}, false, "argument --data=/var/lib/toybox/data/v"},
		{"relative argv under the state dir", func(f *Facts) {
			f.Listeners = []Listener{toyL}
			f.Holders = map[uint64][]Proc{10: {proc(133, "/usr/bin/x", "/var/lib", "x", "toybox/code/abc")}}
		}, false, "argument toybox/code/abc"},
		{"sibling of a root is not under it", func(f *Facts) {
			f.Listeners = []Listener{toyL}
			f.Holders = map[uint64][]Proc{10: {proc(134, "/var/lib/toybox2/x", "/var/lib/toybox2", "x")}}
		}, true, "own service"},
		{"another user's listener", func(f *Facts) {
			f.Listeners = []Listener{l("127.0.0.1", 5432, 1001, 30)}
		}, false, "held by uid 1001, neither the toybox user nor root"},
		{"this vat's container", func(f *Facts) {
			f.Listeners = []Listener{rootL}
			f.Containers = []Container{ctr("myvat-db-1", "myvat", "127.0.0.1")}
		}, true, `published by container "myvat-db-1" of this vat's compose project "myvat"`},
		{"this vat's container, manifest default", func(f *Facts) {
			f.OwnerTyped = false
			f.Listeners = []Listener{rootL}
			f.Containers = []Container{ctr("myvat-db-1", "myvat", "0.0.0.0")}
		}, true, `this vat's compose project "myvat"`},
		{"another vat's container", func(f *Facts) {
			f.Listeners = []Listener{rootL}
			f.Containers = []Container{ctr("db", "other-vat", "127.0.0.1")}
		}, false, `127.0.0.1:5432 is published by container "db" of compose project "other-vat", not this vat's`},
		{"a project of no installed vat", func(f *Facts) {
			f.Listeners = []Listener{rootL}
			f.Containers = []Container{ctr("db", "stranger", "0.0.0.0")}
		}, false, `compose project "stranger", which is no installed vat`},
		{"this vat's project, but the vat is not installed", func(f *Facts) {
			f.InstalledVats = nil
			f.Listeners = []Listener{rootL}
			f.Containers = []Container{ctr("db", "myvat", "0.0.0.0")}
		}, false, "no installed vat"},
		{"unlabelled container", func(f *Facts) {
			f.Listeners = []Listener{rootL}
			f.Containers = []Container{ctr("db", "", "127.0.0.1")}
		}, false, `container "db", which belongs to no compose project`},
		{"operator exception", func(f *Facts) {
			f.Listeners = []Listener{rootL}
			f.Containers = []Container{ctr("kokoro", "tts", "127.0.0.1")}
		}, true, "an operator-listed exception"},
		{"exception, handle of no vat", func(f *Facts) {
			f.Vat = ""
			f.Listeners = []Listener{rootL}
			f.Containers = []Container{ctr("kokoro", "tts", "127.0.0.1")}
		}, true, "an operator-listed exception"},
		{"this vat's project, handle of no vat", func(f *Facts) {
			f.Vat = ""
			f.Listeners = []Listener{rootL}
			f.Containers = []Container{ctr("db", "myvat", "127.0.0.1")}
		}, false, "not this vat's"},
		{"container publishes another address", func(f *Facts) {
			f.Listeners = []Listener{rootL}
			f.Containers = []Container{ctr("db", "myvat", "127.0.0.2")}
		}, false, "no running container publishes it"},
		{"container publishes the IPv6 wildcard, a root daemon holds 127.0.0.1", func(f *Facts) {
			f.OwnerTyped = false
			f.Listeners = []Listener{l("127.0.0.1", 5432, 0, 20)}
			f.Containers = []Container{ctr("db", "myvat", "::")}
		}, false, "no running container publishes it"},
		{"container publishes the IPv4 wildcard, a root daemon holds [::1]", func(f *Facts) {
			f.Target = netip.MustParseAddrPort("[::1]:5432")
			f.Listeners = []Listener{l("::1", 5432, 0, 20)}
			f.Containers = []Container{ctr("db", "myvat", "0.0.0.0")}
		}, false, "no running container publishes it"},
		{"container publishes the IPv6 wildcard, target [::1]", func(f *Facts) {
			f.Target = netip.MustParseAddrPort("[::1]:5432")
			f.Listeners = []Listener{l("::", 5432, 0, 20)}
			f.Containers = []Container{ctr("db", "myvat", "::")}
		}, true, `this vat's compose project "myvat"`},
		{"a publish with no address covers nothing", func(f *Facts) {
			f.Listeners = []Listener{rootL}
			f.Containers = []Container{ctr("db", "myvat", "")}
		}, false, "no running container publishes it"},
		{"container publishes udp only", func(f *Facts) {
			c := ctr("db", "myvat", "127.0.0.1")
			c.Publish[0].Proto = "udp"
			f.Listeners = []Listener{rootL}
			f.Containers = []Container{c}
		}, false, "no running container publishes it"},
		{"plain root daemon", func(f *Facts) {
			f.Listeners = []Listener{rootL}
		}, false, "held by root and no running container publishes it"},
		{"docker unreachable", func(f *Facts) {
			f.Listeners = []Listener{rootL}
			f.DockerErr = errors.New("connection refused")
		}, false, "docker cannot be asked which container publishes it: connection refused"},
		{"root socket held by the supervisor", func(f *Facts) {
			f.Listeners = []Listener{rootL}
			f.Holders = map[uint64][]Proc{20: {proc(1, "/lib/systemd/systemd", "/", "/sbin/init"), proc(123, "/usr/local/bin/toybox", "/", "toybox", "serve")}}
			f.Containers = []Container{ctr("db", "myvat", "0.0.0.0")}
		}, false, "127.0.0.1:5432 is held by the toybox supervisor (pid 123)"},
		{"wildcard and specific: any refusal wins", func(f *Facts) {
			f.Listeners = []Listener{toyL, rootL}
			f.Holders = map[uint64][]Proc{10: {svc}}
			f.Containers = []Container{ctr("db", "other-vat", "0.0.0.0")}
		}, false, "not this vat's"},
		{"wildcard and specific: both admitted", func(f *Facts) {
			f.Listeners = []Listener{toyL, rootL}
			f.Holders = map[uint64][]Proc{10: {svc}}
			f.Containers = []Container{ctr("db", "myvat", "0.0.0.0")}
		}, true, "own service; 127.0.0.1:5432 is published"},
		{"two containers on the port, one foreign", func(f *Facts) {
			f.Listeners = []Listener{rootL}
			f.Containers = []Container{ctr("a", "myvat", "0.0.0.0"), ctr("b", "other-vat", "0.0.0.0")}
		}, false, `container "b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := base()
			tt.edit(&f)
			got := Judge(f)
			if got.Allow != tt.allow || !strings.Contains(got.Reason, tt.reason) {
				t.Errorf("Judge = {%v, %q}; want {%v, ...%q...}", got.Allow, got.Reason, tt.allow, tt.reason)
			}
			if got.Reason == "" {
				t.Errorf("Judge gave no reason")
			}
		})
	}
}

func TestRoleOf(t *testing.T) {
	tests := []struct {
		name string
		p    Proc
		want Role
	}{
		{"plain", Proc{Exe: "/usr/bin/postgres", Comm: "postgres", Argv: []string{"postgres"}}, RoleNone},
		{"toybox serve", Proc{Exe: "/usr/local/bin/toybox", Argv: []string{"toybox", "serve"}}, RoleSupervisor},
		{"deleted switchboard binary", Proc{Exe: "/opt/switchboard", Argv: []string{"sb"}}, RoleSwitchboard},
		{"renamed exe, argv0 says toybox-entry", Proc{Exe: "/tmp/x", Argv: []string{"/x/toybox-entry"}}, RoleEntry},
		{"comm bwrap", Proc{Exe: "/tmp/y", Comm: "bwrap"}, RoleBwrap},
		{"name containing a role is not a role", Proc{Exe: "/usr/bin/toyboxer", Argv: []string{"switchboards"}}, RoleNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RoleOf(tt.p); got != tt.want {
				t.Errorf("RoleOf(%+v) = %q; want %q", tt.p, got, tt.want)
			}
		})
	}
}
