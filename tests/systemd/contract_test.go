//go:build linux

package systemd

import (
	"bufio"
	"bytes"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

// TestUnitsContract checks what the units promise each other and the
// binaries: names of the activated descriptors, who may open each socket,
// the paths the services pass, and the isolation of toybox.
func TestUnitsContract(t *testing.T) {
	sbSock := readUnit(t, "switchboard.socket")
	sbSvc := readUnit(t, "switchboard.service")
	tbSock := readUnit(t, "toybox.socket")
	tbAdmin := readUnit(t, "toybox-admin.socket")
	tbSvc := readUnit(t, "toybox.service")

	publicPath := sbSock.get("Socket", "ListenStream")
	sbArgs := strings.Fields(sbSvc.get("Service", "ExecStart"))
	tbArgs := strings.Fields(tbSvc.get("Service", "ExecStart"))
	localPath := flagValue(sbArgs, "--listen")
	runtimeDir := "/run/" + sbSvc.get("Service", "RuntimeDirectory")

	tests := []struct {
		name      string
		got, want string
	}{
		{"switchboard.socket descriptor name", sbSock.get("Socket", "FileDescriptorName"), "public"},
		{"switchboard.socket group", sbSock.get("Socket", "SocketGroup"), "toybox"},
		{"switchboard.socket mode", sbSock.get("Socket", "SocketMode"), "0660"},
		{"switchboard.socket is a unix socket under /run", boolStr(strings.HasPrefix(publicPath, "/run/") && strings.HasSuffix(publicPath, ".sock")), "true"},
		{"switchboard.service type", sbSvc.get("Service", "Type"), "notify"},
		{"switchboard binds local itself", strings.SplitN(localPath, "=", 2)[0], "local"},
		{"local socket inside the runtime directory", path.Dir(strings.TrimPrefix(localPath, "local=")), runtimeDir},
		{"runtime directory mode", sbSvc.get("Service", "RuntimeDirectoryMode"), "0700"},
		{"public and local directories differ", boolStr(path.Dir(publicPath) != runtimeDir), "true"},
		{"switchboard namespaces", sbSvc.get("Service", "RestrictNamespaces"), "yes"},
		{"switchboard no capabilities", strings.Join(sbSvc["Service"]["CapabilityBoundingSet"], " "), ""},
		{"switchboard has network", sbSvc.get("Service", "PrivateNetwork"), ""},

		{"toybox.socket descriptor name", tbSock.get("Socket", "FileDescriptorName"), "http"},
		{"toybox.socket address", tbSock.get("Socket", "ListenStream"), "127.0.0.1:8787"},
		{"toybox-admin.socket descriptor name", tbAdmin.get("Socket", "FileDescriptorName"), "admin"},
		{"toybox-admin.socket mode", tbAdmin.get("Socket", "SocketMode"), "0600"},
		{"toybox-admin.socket owner", tbAdmin.get("Socket", "SocketUser"), "root"},
		{"toybox.service sockets", tbSvc.get("Service", "Sockets"), "toybox.socket toybox-admin.socket"},
		{"toybox.service type", tbSvc.get("Service", "Type"), "notify"},
		{"toybox.service user", tbSvc.get("Service", "User"), "toybox"},
		{"toybox.service state directory", tbSvc.get("Service", "StateDirectory"), "toybox"},
		{"toybox --state", flagValue(tbArgs, "--state"), "/var/lib/toybox"},
		{"toybox --switchboard is the public socket", flagValue(tbArgs, "--switchboard"), publicPath},
		{"toybox --entry", flagValue(tbArgs, "--entry"), unitBinDir + "toybox-entry"},
		{"toybox has no network", tbSvc.get("Service", "PrivateNetwork"), "yes"},
		{"toybox takes no --http (activated)", flagValue(tbArgs, "--http"), ""},
		{"toybox takes no --admin (activated)", flagValue(tbArgs, "--admin"), ""},
		{"toybox no capabilities", strings.Join(tbSvc["Service"]["CapabilityBoundingSet"], " "), ""},
		{"toybox no new privileges", tbSvc.get("Service", "NoNewPrivileges"), "yes"},
		{"a vat the OOM killer picks stops only itself", tbSvc.get("Service", "OOMPolicy"), "continue"},
		{"toybox makes the walls' cgroups in its own", tbSvc.get("Service", "Delegate"), "yes"},
		{"toybox may write its delegated cgroup", tbSvc.get("Service", "ProtectControlGroups"), "no"},
		{"toybox requires the switchboard socket", boolStr(slices.Contains(strings.Fields(tbSvc.get("Unit", "Requires")), "switchboard.socket")), "true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q; want %q", tt.got, tt.want)
			}
		})
	}

	// The walls need exactly these namespaces; anything else stays refused.
	t.Run("toybox namespaces are the walls' ones", func(t *testing.T) {
		got := strings.Fields(tbSvc.get("Service", "RestrictNamespaces"))
		slices.Sort(got)
		want := []string{"cgroup", "ipc", "mnt", "net", "pid", "user", "uts"}
		if !slices.Equal(got, want) {
			t.Errorf("RestrictNamespaces = %v; want %v", got, want)
		}
	})
	// No other socket unit may hold the local handle.
	t.Run("local socket is not activated", func(t *testing.T) {
		for _, u := range []unit{sbSock, tbSock, tbAdmin} {
			for _, l := range u["Socket"]["ListenStream"] {
				if strings.Contains(l, "local") {
					t.Errorf("a socket unit listens on %q: the local handle must be bound by the switchboard alone", l)
				}
			}
		}
	})
}

func boolStr(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// flagValue returns the value of --name VALUE or --name=VALUE in args.
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// syscallGroups reads systemd-analyze syscall-filter: group → members (system
// calls and nested @groups).
func syscallGroups(t testing.TB) map[string][]string {
	t.Helper()
	out, err := exec.Command(systemdAnalyze(t), "syscall-filter", "--no-pager").Output()
	if err != nil {
		t.Fatalf("systemd-analyze syscall-filter: %v", err)
	}
	groups := map[string][]string{}
	cur := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "@"):
			cur = strings.TrimSpace(line)
		case strings.HasPrefix(line, "    ") && cur != "":
			m := strings.TrimSpace(line)
			if m != "" && !strings.HasPrefix(m, "#") {
				groups[cur] = append(groups[cur], m)
			}
		case strings.TrimSpace(line) == "":
			cur = ""
		}
	}
	if len(groups["@system-service"]) == 0 {
		t.Fatalf("systemd-analyze syscall-filter listed no @system-service:\n%s", out)
	}
	return groups
}

// allowedSyscalls evaluates a unit's SystemCallFilter= lines the way systemd
// does for an allow list: @default is always in, each plain line adds, each
// ~line removes.
func allowedSyscalls(t testing.TB, groups map[string][]string, lines []string) map[string]bool {
	t.Helper()
	if len(lines) == 0 || strings.HasPrefix(lines[0], "~") {
		t.Fatalf("SystemCallFilter %q is not an allow list", lines)
	}
	var expand func(name string, into map[string]bool, seen map[string]bool)
	expand = func(name string, into map[string]bool, seen map[string]bool) {
		if !strings.HasPrefix(name, "@") {
			into[name] = true
			return
		}
		if seen[name] {
			return
		}
		seen[name] = true
		members, ok := groups[name]
		if !ok {
			t.Fatalf("unknown system call group %s", name)
		}
		for _, m := range members {
			expand(m, into, seen)
		}
	}
	allowed := map[string]bool{}
	expand("@default", allowed, map[string]bool{})
	for _, line := range lines {
		deny := strings.HasPrefix(line, "~")
		set := map[string]bool{}
		for _, f := range strings.Fields(strings.TrimPrefix(line, "~")) {
			expand(f, set, map[string]bool{})
		}
		for s := range set {
			if deny {
				delete(allowed, s)
			} else {
				allowed[s] = true
			}
		}
	}
	return allowed
}

// TestSystemCallFilters evaluates each service's filter: toybox must allow
// what bubblewrap calls to build a wall; neither may allow what no service
// of ours needs.
func TestSystemCallFilters(t *testing.T) {
	groups := syscallGroups(t)
	// What bwrap (0.8) calls to build a wall: clone/unshare with namespace
	// flags, the mount calls and pivot_root for the new root, sethostname in
	// its UTS namespace, capset/prctl to drop capabilities, seccomp (or
	// prctl) for the filter, setuid/setgid family in the user namespace.
	bwrapNeeds := []string{
		"clone", "clone3", "unshare", "setns", "mount", "umount2", "pivot_root",
		"sethostname", "capset", "prctl", "seccomp", "setresuid", "setresgid", "setgroups", "execve", "socket", "sendmsg",
	}
	neverNeeded := []string{
		"reboot", "kexec_load", "init_module", "finit_module", "delete_module", "swapon",
		"ptrace", "process_vm_writev", "settimeofday", "clock_settime", "iopl", "ioperm", "acct", "bpf",
	}
	tests := []struct {
		unit         string
		mustAllow    []string
		mustNotAllow []string
	}{
		{"toybox.service", bwrapNeeds, neverNeeded},
		{
			"switchboard.service",
			[]string{"socket", "connect", "accept4", "sendmsg", "recvmsg", "execve", "epoll_pwait"},
			append([]string{"mount", "umount2", "pivot_root", "sethostname", "setns", "chroot", "setuid", "setresuid"}, neverNeeded...),
		},
	}
	for _, tt := range tests {
		t.Run(tt.unit, func(t *testing.T) {
			u := readUnit(t, tt.unit)
			allowed := allowedSyscalls(t, groups, u["Service"]["SystemCallFilter"])
			for _, s := range tt.mustAllow {
				if !allowed[s] {
					t.Errorf("%s refuses %s; it needs it", tt.unit, s)
				}
			}
			for _, s := range tt.mustNotAllow {
				if allowed[s] {
					t.Errorf("%s allows %s; it must not", tt.unit, s)
				}
			}
		})
	}
}
