package owner

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// Decision is the answer for one loopback target: Allow, and always a Reason
// that says why, naming the address and who holds it.
type Decision struct {
	Allow  bool
	Reason string
}

func refuse(format string, a ...any) Decision {
	return Decision{Reason: fmt.Sprintf(format, a...)}
}

// Published is one port a running container publishes on the host.
type Published struct {
	IP    string // host address as Docker reports it; "" or a wildcard means every address
	Port  uint16 // the host (public) port
	Proto string // "tcp", "udp", "sctp"
}

// Container is a running container as the check sees it.
type Container struct {
	ID      string
	Name    string            // without Docker's leading "/"
	Labels  map[string]string // com.docker.compose.project is the one that matters
	Publish []Published
}

// ComposeProjectLabel is the label Docker Compose puts on every container of
// a project, naming the project.
const ComposeProjectLabel = "com.docker.compose.project"

// Facts is everything the judgement needs, gathered beforehand (by Check,
// from /proc and Docker; by tests, by hand). Judge does no I/O.
type Facts struct {
	Target netip.AddrPort
	// OwnAddr: Target's address is one of this host's own (non-loopback)
	// interface addresses, which reaches the same listeners as loopback.
	OwnAddr    bool
	Vat        string // the handle's vat id; "" for a handle of no vat
	OwnerTyped bool   // the address is one the owner typed, not a manifest default

	ToyboxUID     int
	OwnRoots      []string // clean absolute paths
	InstalledVats []string
	Exceptions    []string // compose projects every vat may reach

	// ProcErr is set when /proc/net/tcp{,6} could not be read.
	ProcErr error
	// Listeners are the sockets answering Target (see Answering).
	Listeners []Listener
	// Holders maps a listener's inode to the processes holding it.
	Holders map[uint64][]Proc
	// Hidden lists processes whose descriptors could not be read, by pid,
	// with their effective uid (-1 when unknown); any of them might hold a
	// socket.
	Hidden map[int]int
	// Containers are the running containers; nil with DockerErr set when
	// Docker could not be asked. Only consulted for a root-owned socket.
	Containers []Container
	DockerErr  error
}

// Judge decides one target from its facts. Every listener answering the
// target is judged; the first refusal is the answer. Nothing listening, a
// /proc or Docker error, or a missing fact is a refusal.
func Judge(f Facts) Decision {
	t := f.Target
	if !t.Addr().Unmap().IsLoopback() && !f.OwnAddr {
		return refuse("%s is neither a loopback address nor one of this host's", t)
	}
	if f.ProcErr != nil {
		return refuse("cannot tell who listens on %s: %v", t, f.ProcErr)
	}
	if len(f.Listeners) == 0 {
		return refuse("nothing listens on %s", t)
	}
	var allowed []string
	for _, l := range f.Listeners {
		d := judgeListener(f, l)
		if !d.Allow {
			return d
		}
		if !slices.Contains(allowed, d.Reason) {
			allowed = append(allowed, d.Reason)
		}
	}
	return Decision{Allow: true, Reason: strings.Join(allowed, "; ")}
}

func judgeListener(f Facts, l Listener) Decision {
	t := f.Target
	holders := f.Holders[l.Inode]
	// toybox's own machinery is refused whoever owns the socket.
	for _, p := range holders {
		if r := RoleOf(p); r != RoleNone {
			return refuse("%s is held by %s (pid %d)", t, r, p.PID)
		}
	}
	switch {
	case l.UID == 0:
		return judgeContainer(f, l)
	case l.UID == f.ToyboxUID:
		return judgeToyboxProcess(f, l, holders)
	default:
		return refuse("%s is held by uid %d, neither the toybox user nor root", t, l.UID)
	}
}

func judgeToyboxProcess(f Facts, l Listener, holders []Proc) Decision {
	t := f.Target
	for _, pid := range slices.Sorted(maps.Keys(f.Hidden)) {
		uid := f.Hidden[pid]
		switch {
		case uid == f.ToyboxUID:
			return refuse("%s is held by the toybox user and pid %d of that user cannot be inspected", t, pid)
		case uid < 0:
			return refuse("%s is held by the toybox user and pid %d, of an unknown user, cannot be inspected", t, pid)
		}
	}
	if len(holders) == 0 {
		return refuse("%s is a socket of the toybox user (inode %d) that no visible process holds", t, l.Inode)
	}
	var names []string
	for _, p := range holders {
		for _, u := range p.UIDs {
			if u != f.ToyboxUID {
				return refuse("%s is held by pid %d running as uid %d, not the toybox user", t, p.PID, u)
			}
		}
		if p.Err != "" || p.Exe == "" || p.Cwd == "" || len(p.Argv) == 0 {
			return refuse("%s is held by pid %d of the toybox user, which cannot be inspected: %s", t, p.PID, orUnknown(p.Err))
		}
		if !f.OwnerTyped {
			return refuse("%s is held by pid %d (%s) of the toybox user; only an address the owner typed may reach a process of that user, never a manifest default", t, p.PID, p.Exe)
		}
		if f.Vat == "" {
			return refuse("%s is held by pid %d (%s) of the toybox user, and a handle of no vat has no service of its own", t, p.PID, p.Exe)
		}
		if what, root, under := UnderRoots(p, f.OwnRoots); under {
			return refuse("%s is held by pid %d of the toybox user, whose %s lies under toybox's own %s", t, p.PID, what, root)
		}
		names = append(names, fmt.Sprintf("pid %d (%s)", p.PID, p.Exe))
	}
	return Decision{Allow: true, Reason: fmt.Sprintf("%s is held by %s of the toybox user, outside toybox's own tree: vat %q's own service", t, strings.Join(names, ", "), f.Vat)}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func judgeContainer(f Facts, l Listener) Decision {
	t := f.Target
	if f.DockerErr != nil {
		return refuse("%s is held by root and docker cannot be asked which container publishes it: %v", t, f.DockerErr)
	}
	var pubs []Container
	for _, c := range f.Containers {
		if publishes(c, t) {
			pubs = append(pubs, c)
		}
	}
	if len(pubs) == 0 {
		return refuse("%s is held by root and no running container publishes it", t)
	}
	var ok []string
	for _, c := range pubs {
		proj, labelled := c.Labels[ComposeProjectLabel]
		switch {
		case !labelled || proj == "":
			return refuse("%s is published by container %q, which belongs to no compose project", t, c.Name)
		case slices.Contains(f.Exceptions, proj):
			ok = append(ok, fmt.Sprintf("%s is published by container %q of compose project %q, an operator-listed exception", t, c.Name, proj))
		case !slices.Contains(f.InstalledVats, proj):
			return refuse("%s is published by container %q of compose project %q, which is no installed vat", t, c.Name, proj)
		case f.Vat == "" || proj != f.Vat:
			return refuse("%s is published by container %q of compose project %q, not this vat's", t, c.Name, proj)
		default:
			ok = append(ok, fmt.Sprintf("%s is published by container %q of this vat's compose project %q", t, c.Name, proj))
		}
	}
	return Decision{Allow: true, Reason: strings.Join(ok, "; ")}
}

// publishes reports whether c publishes target over TCP. A publish on a
// wildcard covers its own family only (docker binds "::" v6-only): a
// container on [::]:P does not vouch for a root daemon on 127.0.0.1:P, nor
// 0.0.0.0:P for [::1]:P. A publish whose address docker does not say
// covers nothing.
func publishes(c Container, target netip.AddrPort) bool {
	want := target.Addr().Unmap()
	for _, p := range c.Publish {
		if p.Proto != "tcp" || p.Port != target.Port() {
			continue
		}
		ip, err := netip.ParseAddr(p.IP)
		if err != nil {
			continue
		}
		ip = ip.Unmap()
		if ip == want || ip.IsUnspecified() && ip.Is4() == want.Is4() {
			return true
		}
	}
	return false
}
