package wall

import (
	"crypto/rand"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"toybox/labels"
	"toybox/vat/wall/entry"
	"toybox/vat/wall/seccomp"
)

// Fixed facts of every wall.
const (
	// InsideUID and InsideGID are the app's ids inside the wall: never 0.
	InsideUID = 1000
	InsideGID = 1000
	// NobodyID is the host uid/gid a wall runs as when the supervisor is
	// root and the Spec names none.
	NobodyID = 65534
	// DefaultProxyPort is the CONNECT proxy's port inside the wall.
	DefaultProxyPort = 39080
	// RunMount is where RunDir appears inside the wall.
	RunMount = "/run/toybox"
	// ListenPath is $TOYBOX_LISTEN.
	ListenPath = RunMount + "/app.sock"
	// CapFD is the app's capability descriptor ($TOYBOX_CAP_FD).
	CapFD = 3
	// MaxScanEntries bounds the scan of one bound tree for secrets; a larger
	// tree is not bound.
	MaxScanEntries = 50000
)

// OpKind is one bubblewrap setup operation.
type OpKind string

// Operation kinds, in the words of bwrap's options.
const (
	OpROBind   OpKind = "ro-bind"      // Src bound read-only at Dest, by path (system folders)
	OpROBindFD OpKind = "ro-bind-fd"   // Src opened by fd, bound read-only at Dest
	OpBindFD   OpKind = "bind-fd"      // Src opened by fd, bound read-write at Dest
	OpSymlink  OpKind = "symlink"      // a symlink at Dest pointing at Src
	OpTmpfs    OpKind = "tmpfs"        // an empty tmpfs at Dest
	OpDir      OpKind = "dir"          // an empty directory at Dest
	OpProc     OpKind = "proc"         // a new procfs at Dest
	OpDev      OpKind = "dev"          // a minimal /dev at Dest
	OpFile     OpKind = "file"         // Data as a read-only file at Dest (a copy, no mount)
	OpROData   OpKind = "ro-bind-data" // Data as a read-only file bound over Dest (a copy, mounted: over a kernel file)
	OpMaskFile OpKind = "mask-file"    // Dest hidden behind /dev/null
	OpMaskDir  OpKind = "mask-dir"     // Dest hidden behind an empty tmpfs
	// OpExecFD: Src opened by fd, handed to the wall and run from it
	// (/proc/self/fd/N) as the wall's first process; nothing is mounted,
	// so Dest is empty.
	OpExecFD OpKind = "exec-fd"
)

// BootIDPath is the kernel's boot id, which every wall has a random one of
// its own at.
const BootIDPath = "/proc/sys/kernel/random/boot_id"

// bootID returns a random boot id, as the kernel writes one: a version 4
// UUID and a newline.
func bootID() []byte {
	var u [16]byte
	_, _ = rand.Read(u[:]) // never fails (crypto/rand)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Appendf(nil, "%x-%x-%x-%x-%x\n", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// Op is one step of the wall's mount plan, applied in order.
type Op struct {
	Kind OpKind
	Src  string // host path (binds) or link target (symlink)
	Dest string // path inside the wall
	Data []byte // OpFile's and OpROData's content
	Size int64  // OpTmpfs: the most it holds, in bytes (0: the kernel's default, half the memory)
	Why  string // why this op exists, for people reading the plan

	dir  bool   // fd kinds: the source must be a directory
	id   fileID // fd kinds: the source's identity when planned
	held *Entry // OpExecFD: the entry opened once (Spec.Entry), not reopened at Src
}

// Plan is one walled spawn, computed from a Spec by BuildPlan.
type Plan struct {
	ID   string
	Tier string // TierWalled or TierWalledNoSeccomp
	// Ops are the mounts, in order.
	Ops []Op
	// Env is the app's whole environment (KEY=VALUE, sorted).
	Env []string
	// Chdir is the working directory inside (the real install folder).
	Chdir string
	// Command is the app's argv; Command[0] is an absolute path inside.
	Command []string
	// EntryPath is the host path of toybox-entry, the wall's pid 1 in
	// every wall, which the wall runs from a descriptor (OpExecFD) and
	// never mounts.
	EntryPath string
	// ProxyPort is the CONNECT proxy's port; 0 when Net.None.
	ProxyPort int
	// Forwards are the loopback ports toybox-entry serves.
	Forwards []Forward
	// Etc is the content of the wall's /etc, a folder built at EtcView
	// (in the state dir) and bound read-only.
	Etc     []EtcEntry
	EtcView string
	// Masks lists every path hidden inside the wall (secrets in bound trees,
	// the state dir, hidden entries of a home).
	Masks []string
	// UID and GID are the app's ids inside; HostUID and HostGID the ids
	// bwrap runs as on the host (-1: the supervisor's own).
	UID, GID         int
	HostUID, HostGID int
	// CodeGroup is the supplementary group the wall keeps (Spec.CodeGroup).
	CodeGroup int
	// Seccomp reports whether the filter is applied.
	Seccomp bool
	// Inotify reports whether the filter lets the wall use inotify
	// (Spec.Inotify).
	Inotify bool
	// NoNet: the vat has no way out: no proxy, no forwards, no capability
	// but the app's own fd 3. toybox-entry still runs as the wall's pid 1.
	NoNet bool
	// ListenPort is the app's TCP port on loopback (Spec.ListenPort); 0
	// when the app listens on $TOYBOX_LISTEN itself.
	ListenPort int
	// Transparent: the app's connect() calls are answered by
	// toybox-entry through the vat's Handle (seccomp user notification),
	// and its lookups by the wall's DNS stub. When false for a vat with
	// a way out, ProxyOnly says why (the proxy alone serves it).
	Transparent bool
	ProxyOnly   string
	// MaxTasks is the wall's task limit (RLIMIT_NPROC, soft and hard), set
	// on the wall's first process before it runs anything of the vat's.
	MaxTasks int
	// MCP is the bridge toybox-entry serves for a stdio MCP vat; nil for
	// any other vat.
	MCP *MCPPlan
}

// BuildPlan computes the wall for spec. It reads the filesystem (to resolve
// paths and scan bound trees for secrets) and changes nothing.
func BuildPlan(spec Spec) (*Plan, error) {
	if spec.Host == nil {
		return nil, fmt.Errorf("planning the wall for %q: %w: no Host (wall.NewHost, one per supervisor)", spec.ID, ErrSpec)
	}
	b := &planner{spec: spec, h: spec.Host, p: &Plan{ID: string(spec.ID), UID: InsideUID, GID: InsideGID, HostUID: -1, HostGID: -1, CodeGroup: spec.CodeGroup, Inotify: spec.Inotify}}
	if err := b.build(); err != nil {
		return nil, fmt.Errorf("planning the wall for %q: %w", spec.ID, err)
	}
	return b.p, nil
}

type planner struct {
	spec Spec
	h    *Host // spec.Host
	p    *Plan

	install, data, run, state string   // real paths
	homes                     []string // home folders on this host
	credDir                   string   // the supervisor's credentials directory
	writable                  []string // real paths the vat can write
	trees                     []tree   // bound trees, scanned for what to mask
}

func (b *planner) build() error {
	s := b.spec
	// The id names the folders bound read-write into the wall and its
	// cgroup. It was parsed where it entered; it is checked again here all
	// the same, because a "../" made by a conversion would hand an
	// untrusted program a folder above its own.
	if _, err := labels.ParseVatID(string(s.ID)); err != nil {
		return fmt.Errorf("%w: %w", ErrSpec, err)
	}
	if len(s.Command) == 0 || s.Command[0] == "" {
		return fmt.Errorf("%w: no command", ErrSpec)
	}
	switch b.p.MaxTasks = s.MaxTasks; {
	case s.MaxTasks == 0:
		b.p.MaxTasks = MaxTasks
	case s.MaxTasks < 0:
		return fmt.Errorf("%w: a task limit of %d", ErrSpec, s.MaxTasks)
	}
	var err error
	if b.state, err = realAbs("state dir", s.StateDir, false); err != nil {
		return err
	}
	if b.install, err = realAbs("install folder", s.InstallDir, false); err != nil {
		return err
	}
	if b.data, err = realAbs("data folder", s.DataDir, true); err != nil {
		return err
	}
	if b.run, err = realAbs("run folder", s.RunDir, true); err != nil {
		return err
	}
	for _, d := range []struct{ name, path string }{{"install folder", b.install}, {"data folder", b.data}, {"run folder", b.run}} {
		if d.path == b.state || !within(d.path, b.state) {
			return fmt.Errorf("%w: %s %s is not inside the state dir %s", ErrSpec, d.name, d.path, b.state)
		}
	}
	if err := b.tier(); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		b.p.HostUID, b.p.HostGID = NobodyID, NobodyID
		if s.UID != 0 {
			b.p.HostUID = s.UID
		}
		if s.GID != 0 {
			b.p.HostGID = s.GID
		}
	}
	b.hostFacts()
	b.writable = []string{b.data, b.run, b.state, "/tmp", "/var/tmp", "/dev/shm"}

	b.system()
	if err := b.files(); err != nil {
		return err
	}
	if err := b.hostBinds(); err != nil {
		return err
	}
	if err := b.own(); err != nil {
		return err
	}
	if err := b.command(); err != nil {
		return err
	}
	if err := b.net(); err != nil {
		return err
	}
	if err := b.mcp(); err != nil {
		return err
	}
	b.transparent()
	if err := b.entry(); err != nil {
		return err
	}
	b.etcMountpoints()
	return b.env()
}

func (b *planner) tier() error {
	err := seccomp.Supported()
	switch {
	case b.spec.NoSeccomp && err == nil:
		return fmt.Errorf("%w: NoSeccomp asked for, but this architecture has a filter table; a wall is never weakened", ErrNoSeccomp)
	case b.spec.NoSeccomp:
		b.p.Tier = TierWalledNoSeccomp
	case err != nil:
		return fmt.Errorf("%w: %w (build toybox with cgo and libseccomp: make build)", ErrNoSeccomp, err)
	default:
		b.p.Tier, b.p.Seccomp = TierWalled, true
	}
	return nil
}

// hostFacts collects the home folders and the credentials directory, whose
// hidden entries and contents are never bound.
func (b *planner) hostFacts() {
	env := b.hostEnv()
	seen := map[string]bool{}
	add := func(p string) {
		if p == "" || !filepath.IsAbs(p) || p == "/" {
			return
		}
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		if !seen[p] {
			seen[p] = true
			b.homes = append(b.homes, p)
		}
	}
	add(env["HOME"])
	add("/root")
	if ents, err := os.ReadDir("/home"); err == nil {
		for _, e := range ents {
			add(filepath.Join("/home", e.Name()))
		}
	}
	if c := env["CREDENTIALS_DIRECTORY"]; filepath.IsAbs(c) {
		b.credDir = filepath.Clean(c)
	}
}

func (b *planner) add(op Op) { b.p.Ops = append(b.p.Ops, op) }

func lookSystemOps() []Op {
	var ops []Op
	for _, d := range systemDirs {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
			continue
		case fi.Mode()&fs.ModeSymlink != 0:
			if t, err := os.Readlink(d); err == nil {
				ops = append(ops, Op{Kind: OpSymlink, Src: t, Dest: d, Why: "system folder (symlink)"})
			}
		case fi.IsDir():
			ops = append(ops, Op{Kind: OpROBind, Src: d, Dest: d, Why: "system folder"})
		}
	}
	return ops
}

// system adds the system folders, the chosen /etc entries and the kernel
// filesystems.
func (b *planner) system() {
	b.p.Ops = append(b.p.Ops, b.h.systemOps()...)
	// /etc: one read-only bind of a view the supervisor builds and every
	// wall with the same /etc shares (see EtcEntry). passwd names the
	// vat, so it is the wall's own file, linked from the view.
	b.p.Etc = b.h.baseEtc()
	// Src is set once the view's content is known (etcMountpoints).
	b.add(Op{Kind: OpROBindFD, Dest: "/etc", Why: "/etc: a shared view of only what programs need; group, hosts synthesised", dir: true})
	b.add(Op{Kind: OpFile, Dest: PasswdPath, Data: []byte(b.passwd()), Why: "synthesised: the vat's user only (/etc/passwd links here)"})
	b.add(Op{Kind: OpProc, Dest: "/proc", Why: "the wall's own processes"})
	// A new procfs still shows some of the host: the kernel's command
	// line (boot options, and sometimes a secret passed there), the
	// host's file locks (open file description locks, whoever holds
	// them, by device and inode: when another vat holds which file), and
	// the host's boot id, the same in every wall (it ties walls to one
	// machine and one boot). Each is covered by a file of the wall's own.
	b.add(Op{Kind: OpROData, Dest: "/proc/cmdline", Why: "masked: the host's kernel command line (empty)"})
	b.add(Op{Kind: OpROData, Dest: "/proc/locks", Why: "masked: the host's file locks (empty)"})
	b.add(Op{Kind: OpROData, Dest: BootIDPath, Data: bootID(), Why: "the wall's own boot id, random"})
	b.add(Op{Kind: OpDev, Dest: "/dev", Why: "null, zero, random, urandom, fd links, shm"})
	tmp := b.spec.TmpBytes
	if tmp <= 0 {
		tmp = TmpBytes
	}
	b.add(Op{Kind: OpTmpfs, Dest: "/tmp", Size: tmp, Why: "TMPDIR"})
	b.add(Op{Kind: OpTmpfs, Dest: "/var/tmp", Size: VarTmpBytes, Why: "scratch"})
}

// command resolves the app's argv[0] and binds it when it lives outside the
// folders already bound.
func (b *planner) command() error {
	argv := slices.Clone(b.spec.Command)
	c := argv[0]
	if !filepath.IsAbs(c) {
		c = filepath.Join(b.install, c)
	}
	c = filepath.Clean(c)
	real, ok := kernelReal(c, false, false)
	if !ok {
		var err error
		if real, err = filepath.EvalSymlinks(c); err != nil {
			return fmt.Errorf("%w: command %s: %w", ErrSpec, c, err)
		}
	}
	fi, err := os.Stat(real)
	if err != nil {
		return fmt.Errorf("%w: command %s: %w", ErrSpec, c, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%w: command %s is not an executable file", ErrSpec, c)
	}
	if b.p.HostUID >= 0 && within(real, b.install) && !mayReadExec(fi, b.p.HostUID, b.p.HostGID, b.p.CodeGroup) {
		return fmt.Errorf("%w: command %s is not readable and executable by the wall (mode %v); the wall runs as uid %d", ErrSpec, c, fi.Mode().Perm(), b.p.HostUID)
	}
	argv[0] = c
	switch {
	case within(real, b.install):
	case b.inSystem(real):
	default:
		for _, w := range b.writable {
			if real == w || within(real, w) {
				return fmt.Errorf("%w: %s is in %s, which the vat can write", ErrCommandWritable, real, w)
			}
		}
		if err := b.refuse(real); err != nil {
			return fmt.Errorf("command %s: %w", real, err)
		}
		b.add(Op{Kind: OpROBindFD, Src: real, Dest: real, Why: "its command, read-only", id: idOf(fi)})
		argv[0] = real
	}
	b.p.Command = argv
	b.p.Chdir = b.install
	b.p.EntryPath = b.spec.EntryPath
	if b.spec.Entry != nil {
		b.p.EntryPath = b.spec.Entry.path
	}
	return nil
}

func (b *planner) inSystem(p string) bool {
	for _, op := range b.p.Ops {
		if op.Kind == OpROBind && (p == op.Src || within(p, op.Src)) {
			return true
		}
	}
	return false
}

// entry hands toybox-entry to the wall, whose pid 1 it is in every wall:
// it forwards stop requests to the app's process group, reaps orphans and
// passes the app's exit status on (an app that is pid 1 itself ignores a
// SIGTERM it has no handler for). It is run from its descriptor (through
// the wall's /proc), not bound: a bind costs bubblewrap a pass over the
// mount table, and the app has no use for the entry's file.
func (b *planner) entry() error {
	s := b.spec
	if s.Entry != nil {
		b.add(Op{Kind: OpExecFD, Src: s.Entry.path, Why: "toybox-entry, run from the descriptor opened when toybox started (not mounted)", id: s.Entry.id, held: s.Entry})
		return nil
	}
	if !filepath.IsAbs(s.EntryPath) {
		return fmt.Errorf("%w: entry path %q is not absolute", ErrSpec, s.EntryPath)
	}
	// The operator's path may pass through symlinks (a link in a bin
	// folder, say): the wall opens the file it names, with none on the way.
	real, err := filepath.EvalSymlinks(s.EntryPath)
	if err != nil {
		return fmt.Errorf("%w: toybox-entry: %w", ErrSpec, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return fmt.Errorf("%w: toybox-entry: %w", ErrSpec, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: toybox-entry %s is not a regular file", ErrSpec, s.EntryPath)
	}
	b.add(Op{Kind: OpExecFD, Src: real, Why: "toybox-entry, run from its descriptor (not mounted)", id: idOf(fi)})
	return nil
}

// transparent decides transparent egress: a vat with a way out whose
// app runs under the wall's filter, where the kernel has what it takes
// (seccomp.NotifierSupported); otherwise the proxy alone, and
// Plan.ProxyOnly says why.
func (b *planner) transparent() {
	switch {
	case b.p.NoNet:
	case !b.p.Seccomp:
		b.p.ProxyOnly = "the wall has no seccomp filter"
	default:
		if err := seccomp.NotifierSupported(); err != nil {
			b.p.ProxyOnly = err.Error()
			return
		}
		b.p.Transparent = true
	}
}

// net validates the forwards and chooses the proxy port.
func (b *planner) net() error {
	n := b.spec.Net
	if err := b.listen(); err != nil {
		return err
	}
	if n.None {
		if len(n.Forwards) > 0 {
			return fmt.Errorf("%w: Net.None with forwards", ErrSpec)
		}
		b.p.NoNet = true
		return nil
	}
	if len(n.Forwards) > entry.MaxForwards {
		return fmt.Errorf("%w: %d forwards (at most %d)", ErrSpec, len(n.Forwards), entry.MaxForwards)
	}
	used := map[int]bool{}
	for _, f := range n.Forwards {
		if f.Port == 0 || f.TargetPort == 0 || f.Host == "" {
			return fmt.Errorf("%w: forward %+v needs a port, a host and a target port", ErrSpec, f)
		}
		if !entry.ForwardHostOK(f.Host) {
			return fmt.Errorf("%w: forward host %q is not a DNS name or an IP address (ASCII letters, digits, '.', '-', '_', ':')", ErrSpec, f.Host)
		}
		if used[int(f.Port)] {
			return fmt.Errorf("%w: port %d forwarded twice", ErrSpec, f.Port)
		}
		if int(f.Port) == b.p.ListenPort {
			return fmt.Errorf("%w: port %d is both forwarded and the app's own (ListenPort)", ErrSpec, f.Port)
		}
		used[int(f.Port)] = true
	}
	if b.p.ListenPort != 0 {
		used[b.p.ListenPort] = true // the proxy moves past the app's port
	}
	port := n.ProxyPort
	if port == 0 {
		port = DefaultProxyPort
	}
	if port < 1 || port > 65535 {
		return fmt.Errorf("%w: proxy port %d", ErrSpec, port)
	}
	for used[port] {
		if port++; port > 65535 {
			return fmt.Errorf("%w: no free proxy port", ErrSpec)
		}
	}
	b.p.ProxyPort = port
	b.p.Forwards = slices.Clone(n.Forwards)
	return nil
}

// listen checks the app's own TCP port (Spec.ListenPort).
func (b *planner) listen() error {
	port := b.spec.ListenPort
	switch {
	case port == 0:
		return nil
	case port < 1 || port > 65535:
		return fmt.Errorf("%w: listen port %d is not 1-65535", ErrSpec, port)
	case b.spec.MCP != nil:
		return fmt.Errorf("%w: a stdio MCP vat listens on no port (ListenPort %d)", ErrSpec, port)
	}
	b.p.ListenPort = port
	return nil
}

// realAbs resolves an absolute folder to its real path. own folders (data,
// run) must not be symlinks themselves.
func realAbs(name, p string, noLink bool) (string, error) {
	if p == "" || !filepath.IsAbs(p) {
		return "", fmt.Errorf("%w: %s %q is not an absolute path", ErrSpec, name, p)
	}
	p = filepath.Clean(p)
	if r, ok := kernelReal(p, true, noLink); ok {
		return r, nil
	}
	if noLink {
		fi, err := os.Lstat(p)
		if err != nil {
			return "", fmt.Errorf("%w: %s: %w", ErrSpec, name, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return "", fmt.Errorf("%w: %s %s is a symlink", ErrSymlink, name, p)
		}
	}
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrSpec, name, err)
	}
	fi, err := os.Stat(r)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrSpec, name, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: %s %s is not a folder", ErrSpec, name, p)
	}
	return r, nil
}

// within reports whether p is strictly inside dir (both clean and absolute).
func within(p, dir string) bool {
	if dir == "" {
		return false
	}
	if dir == "/" {
		return p != "/"
	}
	return strings.HasPrefix(p, dir+"/")
}
