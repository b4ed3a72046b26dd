package wall

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

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

	dir bool   // fd kinds: the source must be a directory
	id  fileID // fd kinds: the source's identity when planned
}

// Plan is one walled spawn, computed from a Spec without side effects.
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

var idRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// systemDirs are bound read-only at their own path (or recreated as the
// same symlink) in every wall.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcFiles are the only entries of /etc a wall sees (besides the synthesised
// passwd, group and hosts). /etc/shadow and friends are never among them.
var etcFiles = []string{
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/nsswitch.conf",
	"/etc/host.conf", "/etc/gai.conf", "/etc/protocols", "/etc/services", "/etc/mime.types",
	"/etc/ssl/certs", "/etc/ssl/openssl.cnf", "/etc/ca-certificates", "/etc/pki/tls/certs",
	"/etc/alternatives", "/etc/localtime", "/etc/timezone", "/etc/os-release",
}

// secretNames are never bound as a file of their own, and are masked at any
// depth of a bound tree.
var secretNames = map[string]bool{".env": true, ".mcp.json": true}

// maskedNames are masked at any depth of a bound tree too: the usual files
// secrets live in, which a folder an owner binds may hold.
var maskedNames = map[string]bool{
	".envrc": true, ".netrc": true, ".git-credentials": true, ".pgpass": true,
	".npmrc": true, ".pypirc": true,
}

// envTemplates are the .env.* names that hold no secrets by convention and
// that programs read (dotenv-safe checks .env.example); they stay visible.
var envTemplates = map[string]bool{".env.example": true, ".env.sample": true, ".env.template": true, ".env.dist": true}

// masked reports whether a name found in a bound tree is masked: a secret
// name, one of maskedNames, or a .env.* variant (.env.local,
// .env.production) that is not a template.
func masked(name string) bool {
	if secretNames[name] || maskedNames[name] {
		return true
	}
	return strings.HasPrefix(name, ".env.") && !envTemplates[name]
}

// neverSources are never bind sources, nor anything under them.
var neverSources = []string{
	"/proc", "/sys", "/dev", "/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-",
	"/etc/sudoers", "/etc/sudoers.d", "/etc/systemd", "/etc/xdg/autostart", "/run/systemd",
	"/usr/lib/systemd", "/lib/systemd", "/var/lib/systemd", "/etc/credstore", "/etc/credstore.encrypted",
	"/run/credentials", "/run/credstore",
}

// BuildPlan computes the wall for spec. It reads the filesystem (to resolve
// paths and scan bound trees for secrets) and changes nothing.
func BuildPlan(spec Spec) (*Plan, error) {
	b := &planner{spec: spec, p: &Plan{ID: spec.ID, UID: InsideUID, GID: InsideGID, HostUID: -1, HostGID: -1, CodeGroup: spec.CodeGroup, Inotify: spec.Inotify}}
	if err := b.build(); err != nil {
		return nil, fmt.Errorf("planning the wall for %q: %w", spec.ID, err)
	}
	return b.p, nil
}

type planner struct {
	spec Spec
	p    *Plan

	install, data, run, state string   // real paths
	homes                     []string // home folders on this host
	credDir                   string   // the supervisor's credentials directory
	writable                  []string // real paths the vat can write
	trees                     []tree   // bound trees, scanned for what to mask
}

func (b *planner) build() error {
	s := b.spec
	if !idRE.MatchString(s.ID) {
		return fmt.Errorf("%w: id %q is not [a-z0-9][a-z0-9-]{0,62}", ErrSpec, s.ID)
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

// etcMountpoints adds to the /etc view an empty mountpoint for every later
// op whose destination is below /etc (an owner-chosen file there, a mask):
// bubblewrap cannot make one in a read-only bind. Then the view's content
// is known, and so its folder.
func (b *planner) etcMountpoints() {
	view := -1
	for i, op := range b.p.Ops {
		if op.Dest == "/etc" {
			view = i
			continue
		}
		if view < 0 || !within(op.Dest, "/etc") {
			continue
		}
		dir := op.dir || op.Kind == OpMaskDir || op.Kind == OpDir || op.Kind == OpTmpfs
		if op.Kind == OpROBind {
			if fi, err := os.Stat(op.Src); err == nil {
				dir = fi.IsDir()
			}
		}
		b.p.Etc = append(b.p.Etc, EtcEntry{Path: strings.TrimPrefix(op.Dest, "/etc/"), Mount: true, Dir: dir})
	}
	if view >= 0 {
		b.p.EtcView = EtcViewDir(b.state, b.p.Etc)
		b.p.Ops[view].Src = b.p.EtcView
	}
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

func (b *planner) hostEnv() map[string]string {
	list := b.spec.HostEnv
	if list == nil {
		// The host's environment names what the plan hides (HOME,
		// CREDENTIALS_DIRECTORY). A caller that leaves HostEnv out must
		// not lose those masks.
		list = os.Environ() //nolint:forbidigo // a fact of the host, not a setting
	}
	m := make(map[string]string, len(list))
	for _, kv := range list {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

func (b *planner) add(op Op) { b.p.Ops = append(b.p.Ops, op) }

// systemOps binds the system folders this host has, read-only at their
// own paths, and makes those that are links (a merged /usr's /bin, /lib)
// the same links. They are looked up at most once per etcRecheck, as
// /etc's entries are.
func systemOps() []Op {
	systemLast.Lock()
	defer systemLast.Unlock()
	if systemLast.ops == nil || time.Since(systemLast.at) >= etcRecheck {
		systemLast.ops, systemLast.at = lookSystemOps(), time.Now()
	}
	return slices.Clone(systemLast.ops)
}

var systemLast struct {
	sync.Mutex
	at  time.Time
	ops []Op
}

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
	b.p.Ops = append(b.p.Ops, systemOps()...)
	// /etc: one read-only bind of a view the supervisor builds and every
	// wall with the same /etc shares (see EtcEntry). passwd names the
	// vat, so it is the wall's own file, linked from the view.
	b.p.Etc = baseEtc()
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

func (b *planner) passwd() string {
	return fmt.Sprintf("root:x:0:0:root:/nonexistent:/usr/sbin/nologin\nvat:x:%d:%d:toybox vat %s:%s:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		InsideUID, InsideGID, b.spec.ID, b.data)
}

// baseEtc is the content of every wall's /etc view before mountpoints:
// the allowlisted entries the host has, the synthesised group, hosts and
// hostname, and the link to the wall's own passwd.
func baseEtc() []EtcEntry {
	return append(presentEtcEntries(),
		EtcEntry{Path: "passwd", Link: PasswdPath},
		EtcEntry{Path: "group", Data: []byte(fmt.Sprintf("root:x:0:\nvat:x:%d:\nnogroup:x:65534:\n", InsideGID))},
		EtcEntry{Path: "hosts", Data: []byte("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")},
		// toybox-entry's DNS stub, where the wall has transparent egress
		// (entry.DNSAddr; elsewhere a lookup fails at once).
		EtcEntry{Path: "resolv.conf", Data: []byte("nameserver 127.0.0.53\noptions edns0\n")},
		EtcEntry{Path: "hostname", Data: []byte("toybox\n")},
	)
}

// tree is a folder bound into the wall: its real host path, and where it
// shows inside (the path the owner typed, which may differ through a
// symlink on the host).
type tree struct{ real, dest string }

// files adds the owner-chosen binds, then the masks for every tree bound so
// far.
func (b *planner) files() error {
	type fileBind struct {
		path string
		rw   bool
		dir  bool
		kind string
	}
	var binds []fileBind
	for _, p := range b.spec.Files.Read {
		binds = append(binds, fileBind{p, false, false, "sandbox.files.read"})
	}
	for _, p := range b.spec.Files.Write {
		binds = append(binds, fileBind{p, true, false, "sandbox.files.write"})
	}
	for _, p := range b.spec.Files.OAuthDir {
		binds = append(binds, fileBind{p, true, true, "sandbox.files.oauthDir"})
	}
	// Writable owner paths first: a command there is refused.
	for _, fb := range binds {
		if fb.rw {
			if r, err := filepath.EvalSymlinks(filepath.Clean(fb.path)); err == nil {
				b.writable = append(b.writable, r)
			}
		}
	}
	// A grant inside a folder the vat can write (its data, its run folder,
	// a write or oauthDir grant) is refused: the vat could rename the
	// grant's parent there and leave a symlink in its place, so that the
	// next start binds whatever that names; and a write bind of the parent
	// would cover a read grant inside it anyway.
	vatWritable := []string{b.data, b.run}
	for _, fb := range binds {
		if fb.rw && filepath.IsAbs(fb.path) {
			typed := filepath.Clean(fb.path)
			vatWritable = append(vatWritable, typed)
			if r, err := filepath.EvalSymlinks(typed); err == nil && r != typed {
				vatWritable = append(vatWritable, r)
			}
		}
	}
	for _, fb := range binds {
		if !filepath.IsAbs(fb.path) {
			return fmt.Errorf("%w: %s path %q is not absolute", ErrRefusedBind, fb.kind, fb.path)
		}
		typed := filepath.Clean(fb.path)
		real, _ := filepath.EvalSymlinks(typed)
		for _, w := range vatWritable {
			if w != "" && (within(typed, w) || (real != "" && within(real, w))) {
				return fmt.Errorf("%w: %s %s lies inside %s, which the vat can write (grant folders side by side, or the outer one alone)", ErrRefusedBind, fb.kind, typed, w)
			}
		}
	}
	for _, fb := range binds {
		typed := filepath.Clean(fb.path)
		if err := b.refuse(typed); err != nil {
			return fmt.Errorf("%s %s: %w", fb.kind, typed, err)
		}
		if err := wallOwnDest(typed); err != nil {
			return fmt.Errorf("%s %s: %w", fb.kind, typed, err)
		}
		real, err := filepath.EvalSymlinks(typed)
		if err != nil {
			return fmt.Errorf("%w: %s %s: %w", ErrRefusedBind, fb.kind, typed, err)
		}
		if err := b.refuse(real); err != nil {
			return fmt.Errorf("%s %s (really %s): %w", fb.kind, typed, real, err)
		}
		fi, err := os.Stat(real)
		if err != nil {
			return fmt.Errorf("%w: %s %s: %w", ErrRefusedBind, fb.kind, typed, err)
		}
		if fb.dir && !fi.IsDir() {
			return fmt.Errorf("%w: %s %s is not a folder", ErrRefusedBind, fb.kind, typed)
		}
		if !fi.IsDir() && !fi.Mode().IsRegular() {
			return fmt.Errorf("%w: %s %s is neither a file nor a folder", ErrRefusedBind, fb.kind, typed)
		}
		// A bind keeps the read-only flag of the mount it comes from: a
		// write grant there would start and then fail on every write.
		if fb.rw && readOnlyMount(real) {
			return fmt.Errorf("%w: %s %s is on a read-only mount here, so the vat could not write it (under the systemd unit, ProtectSystem=strict makes every path but the state dir read-only to toybox: add it to ReadWritePaths= in a drop-in, see docs/systemd.md)", ErrRefusedBind, fb.kind, typed)
		}
		kind := OpROBindFD
		if fb.rw {
			kind = OpBindFD
		}
		b.add(Op{Kind: kind, Src: real, Dest: typed, Why: fb.kind, dir: fi.IsDir(), id: idOf(fi)})
		if fi.IsDir() {
			b.trees = append(b.trees, tree{real: real, dest: typed})
		}
	}
	return b.maskTrees(b.trees)
}

// refuse says why p may never be a bind source, or nil.
// wallOwnDest refuses an owner-chosen bind at a place the wall makes
// itself: its root, its /etc (the supervisor's view; files inside it are
// fine) and the vat's run folder.
func wallOwnDest(dest string) error {
	switch dest {
	case "/", "/etc":
		return fmt.Errorf("%w: the wall's own %s cannot be replaced (choose files or folders inside it)", ErrRefusedBind, dest)
	}
	for _, own := range []string{"/run/toybox", "/run/toybox-etc"} {
		if dest == own || within(dest, own) {
			return fmt.Errorf("%w: %s is the wall's own", ErrRefusedBind, own)
		}
	}
	return nil
}

func (b *planner) refuse(p string) error {
	if secretNames[filepath.Base(p)] {
		return fmt.Errorf("%w: a %s file is never bound", ErrRefusedBind, filepath.Base(p))
	}
	if p == b.state || within(p, b.state) {
		if p == b.data || within(p, b.data) {
			return nil // its own data, bound anyway
		}
		return fmt.Errorf("%w: inside the supervisor's state dir (settings, code, other vats' data)", ErrRefusedBind)
	}
	for _, n := range neverSources {
		if p == n || within(p, n) {
			return fmt.Errorf("%w: %s is never a bind source", ErrRefusedBind, n)
		}
	}
	if b.credDir != "" && (p == b.credDir || within(p, b.credDir)) {
		return fmt.Errorf("%w: the supervisor's credentials directory", ErrRefusedBind)
	}
	for _, h := range b.homes {
		if !within(p, h) {
			continue
		}
		rel, _ := filepath.Rel(h, p)
		if strings.HasPrefix(rel, ".") {
			return fmt.Errorf("%w: a hidden entry of the home folder %s", ErrRefusedBind, h)
		}
		for _, bad := range []string{"autostart", "systemd"} {
			if slices.Contains(strings.Split(rel, string(filepath.Separator)), bad) {
				return fmt.Errorf("%w: an %s folder", ErrRefusedBind, bad)
			}
		}
	}
	return nil
}

// maskTrees scans trees and masks every secret in them, plus the state dir,
// the credentials directory and the hidden entries of any home inside them.
func (b *planner) maskTrees(trees []tree) error {
	for _, tr := range trees {
		t := tr.real
		secrets, err := scan(t, b.scanLimit())
		if err != nil {
			return err
		}
		for _, s := range secrets {
			b.mask(s)
		}
		for _, n := range neverSources {
			if within(n, t) {
				b.mask(n)
			}
		}
		for _, inner := range []string{b.state, b.credDir} {
			if inner != "" && (inner == t || within(inner, t)) {
				b.mask(inner)
			}
		}
		for _, h := range b.homes {
			if h != t && !within(h, t) {
				continue
			}
			ents, err := os.ReadDir(h)
			if err != nil {
				continue
			}
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), ".") {
					b.mask(filepath.Join(h, e.Name()))
				}
			}
		}
	}
	return nil
}

func (b *planner) scanLimit() int {
	if b.spec.ScanLimit > 0 {
		return b.spec.ScanLimit
	}
	return MaxScanEntries
}

// mask hides p (a real host path) wherever it shows inside the wall: in
// each bound tree that holds it, at the tree's destination (the typed path
// of a grant reached through a symlink, not the real one).
func (b *planner) mask(p string) {
	fi, err := os.Lstat(p)
	if err != nil {
		return
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		// A symlinked secret: mask what it names if that is visible.
		r, err := filepath.EvalSymlinks(p)
		if err != nil || !b.visible(r) {
			return
		}
		p = r
		if fi, err = os.Stat(p); err != nil {
			return
		}
	}
	for _, t := range b.trees {
		if p != t.real && !within(p, t.real) {
			continue
		}
		rel, _ := filepath.Rel(t.real, p)
		dest := filepath.Join(t.dest, rel)
		if slices.Contains(b.p.Masks, dest) {
			continue
		}
		b.p.Masks = append(b.p.Masks, dest)
		if fi.IsDir() {
			b.add(Op{Kind: OpMaskDir, Dest: dest, Why: "masked"})
		} else {
			b.add(Op{Kind: OpMaskFile, Dest: dest, Why: "masked"})
		}
	}
}

// visible reports whether host path p is inside a tree bound so far.
func (b *planner) visible(p string) bool {
	for _, t := range b.trees {
		if p == t.real || within(p, t.real) {
			return true
		}
	}
	return false
}

// own adds the vat's own folders (after the owner's trees and their masks,
// so they show through a masked state dir) and its own .env.
func (b *planner) own() error {
	fi, err := os.Stat(b.install)
	if err != nil {
		return fmt.Errorf("install folder: %w", err)
	}
	b.add(Op{Kind: OpROBindFD, Src: b.install, Dest: b.install, Why: "its code, read-only", dir: true, id: idOf(fi)})
	b.trees = append(b.trees, tree{real: b.install, dest: b.install})
	if err := b.maskTrees([]tree{{real: b.install, dest: b.install}}); err != nil {
		return err
	}
	if fi, err = os.Stat(b.data); err != nil {
		return fmt.Errorf("data folder: %w", err)
	}
	b.add(Op{Kind: OpBindFD, Src: b.data, Dest: b.data, Why: "its data, read-write", dir: true, id: idOf(fi)})
	if fi, err = os.Stat(b.run); err != nil {
		return fmt.Errorf("run folder: %w", err)
	}
	b.add(Op{Kind: OpBindFD, Src: b.run, Dest: RunMount, Why: "its HTTP socket", dir: true, id: idOf(fi)})
	if b.spec.OwnEnvFile {
		p := filepath.Join(b.install, ".env")
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			return fmt.Errorf("%w: ownEnvFile: %w", ErrRefusedBind, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("%w: ownEnvFile %s is a symlink: it names a file the vat does not own", ErrSymlink, p)
		case !fi.Mode().IsRegular():
			return fmt.Errorf("%w: ownEnvFile %s is not a regular file", ErrRefusedBind, p)
		}
		b.add(Op{Kind: OpROBindFD, Src: p, Dest: p, Why: "ownEnvFile, read-only over its mask", id: idOf(fi)})
	}
	return nil
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
	case b.p.MCP != nil:
		b.p.ProxyOnly = "a stdio MCP vat's processes use the proxy alone"
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

// RuntimeEnv is what every wall's environment holds for common runtimes
// under a supervisor, unless the vat's manifest declares the key (the
// owner's value wins); so is PYTHONPYCACHEPREFIX, below the data folder.
// Each changes behaviour for the better only.
var RuntimeEnv = map[string]string{
	// Python block-buffers stdout to a pipe: the vat's log would show
	// nothing of a print until 8 KiB had gathered, or the app ended.
	"PYTHONUNBUFFERED": "1",
}

// env builds the app's environment: nothing is inherited but the allowlist.
// A declared key that is not a name, or a value holding a NUL byte, is an
// error; a declared TOYBOX_* key is overridden by the wall's own.
func (b *planner) env() error {
	m := map[string]string{}
	for k, v := range b.hostEnv() {
		if k == "PATH" || k == "LANG" || k == "TZ" || strings.HasPrefix(k, "LC_") {
			m[k] = v
		}
	}
	if m["PATH"] == "" {
		m["PATH"] = "/usr/local/bin:/usr/bin:/bin"
	}
	maps.Copy(m, RuntimeEnv)
	// Python writes its bytecode beside the source, in the vat's
	// read-only code: it would compile every module again at each start.
	m["PYTHONPYCACHEPREFIX"] = filepath.Join(b.data, ".cache", "python")
	for k, v := range b.spec.Env {
		if !validEnvKey(k) {
			return fmt.Errorf("%w: environment key %q is not a variable name", ErrSpec, k)
		}
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("%w: the value of %s holds a NUL byte", ErrSpec, k)
		}
		if !strings.HasPrefix(k, "TOYBOX_") {
			m[k] = v
		}
	}
	cache := filepath.Join(b.data, ".cache")
	for k, v := range map[string]string{
		"TOYBOX_VAT":       b.spec.ID,
		"TOYBOX_LISTEN":    ListenPath,
		"TOYBOX_CAP_FD":    strconv.Itoa(CapFD),
		"TOYBOX_DATA":      b.data,
		"HOME":             b.data,
		"XDG_CACHE_HOME":   cache,
		"npm_config_cache": filepath.Join(cache, "npm"),
		"UV_CACHE_DIR":     filepath.Join(cache, "uv"),
		"TMPDIR":           "/tmp",
		"USER":             "vat",
		"LOGNAME":          "vat",
	} {
		m[k] = v
	}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy", "NODE_USE_ENV_PROXY"} {
		delete(m, k)
	}
	if !b.p.NoNet {
		proxy := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(b.p.ProxyPort))
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			m[k] = proxy
		}
		m["NO_PROXY"] = "localhost,127.0.0.1,::1"
		m["no_proxy"] = m["NO_PROXY"]
		m["NODE_USE_ENV_PROXY"] = "1"
	}
	if b.p.ListenPort != 0 {
		// The app listens on its port; $TOYBOX_LISTEN is the entry's.
		m["PORT"] = strconv.Itoa(b.p.ListenPort)
		delete(m, "TOYBOX_LISTEN")
	}
	if b.p.MCP != nil {
		// A stdio MCP vat's processes listen on nothing and hold no
		// capability.
		delete(m, "TOYBOX_LISTEN")
		delete(m, "TOYBOX_CAP_FD")
	}
	for k, v := range m {
		b.p.Env = append(b.p.Env, k+"="+v)
	}
	slices.Sort(b.p.Env)
	return nil
}

// validEnvKey reports whether k is a portable variable name.
func validEnvKey(k string) bool {
	if k == "" || (k[0] >= '0' && k[0] <= '9') {
		return false
	}
	for _, r := range k {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
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

// scan walks the tree at root (not following symlinks) and returns every
// name to mask (.env, .mcp.json and the rest: masked; every unix socket and
// FIFO) at any depth. More than MaxScanEntries entries:
// ErrTreeTooLarge, and the tree is not bound.
func scan(root string, limit int) ([]string, error) {
	var found []string
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("scanning %s for secrets: %w", root, err)
		}
		if n++; n > limit {
			return fmt.Errorf("%w: %s has more than %d entries; not bound", ErrTreeTooLarge, root, limit)
		}
		// A read-only bind still lets the wall connect to a socket in it
		// and write to a FIFO: the supervisor's admin socket, a switchboard
		// socket, docker.sock or an ssh agent would be authority it was
		// never granted. Masked like secrets.
		if p != root && (masked(d.Name()) || d.Type()&(fs.ModeSocket|fs.ModeNamedPipe) != 0) {
			found = append(found, p)
			if d.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return found, nil
}

// EtcEntry is one entry of the /etc view.
type EtcEntry struct {
	// Path is the entry's path below /etc ("group", "ssl/certs").
	Path string
	// Src is the host path copied: a file's content, a symlink made again
	// with the same target, or a folder copied entry by entry (files,
	// folders and symlinks; nothing else).
	Src string
	// Data is a synthesised file's content.
	Data []byte
	// Link makes the entry a symlink to Link.
	Link string
	// Mount marks an empty mountpoint for a later bind (a folder if Dir).
	Mount bool
	Dir   bool
}

// PasswdPath is the wall's own passwd file, which /etc/passwd links to.
const PasswdPath = "/run/toybox-etc/passwd"

// EtcViewDir is the folder of the /etc view holding entries: named by its
// content, so walls with the same /etc share one.
func EtcViewDir(stateDir string, entries []EtcEntry) string {
	// Every spawn asks, almost always for the entries it asked for last:
	// the last answer is kept, and given again for equal entries (a
	// comparison costs far less than the hash).
	etcViewLast.Lock()
	defer etcViewLast.Unlock()
	if etcViewLast.dir != "" && etcViewLast.state == stateDir && slices.EqualFunc(etcViewLast.entries, entries, EtcEntry.same) {
		return etcViewLast.dir
	}
	dir := etcViewDir(stateDir, entries)
	kept := slices.Clone(entries)
	for i := range kept {
		kept[i].Data = bytes.Clone(kept[i].Data) // the caller's bytes may change
	}
	etcViewLast.state, etcViewLast.entries, etcViewLast.dir = stateDir, kept, dir
	return dir
}

var etcViewLast struct {
	sync.Mutex
	state   string
	entries []EtcEntry
	dir     string
}

// same reports whether e and o are the same entry (everything key hashes).
func (e EtcEntry) same(o EtcEntry) bool {
	return e.Path == o.Path && e.Src == o.Src && e.Link == o.Link && e.Mount == o.Mount && e.Dir == o.Dir && bytes.Equal(e.Data, o.Data)
}

func etcViewDir(stateDir string, entries []EtcEntry) string {
	h := sha256.New()
	for _, e := range entries {
		fmt.Fprintln(h, e.key())
	}
	return filepath.Join(stateDir, "etc", hex.EncodeToString(h.Sum(nil))[:24])
}

// key is everything that makes an entry what it is, in one line.
func (e EtcEntry) key() string {
	return fmt.Sprintf("%q %q %q %t %t %x", e.Path, e.Src, e.Link, e.Mount, e.Dir, sha256.Sum256(e.Data))
}

// etcRecheck is how long what /etc holds is taken as known: which of the
// allowlisted entries exist, and whether a view built from them is still
// current. A burst of spawns looks at /etc once; a change to /etc reaches
// walls started a second later.
const etcRecheck = time.Second

var etcPresent struct {
	sync.Mutex
	at      time.Time
	entries []EtcEntry
}

// presentEtcEntries is etcEntries(etcFiles), looked up at most once per
// etcRecheck.
func presentEtcEntries() []EtcEntry {
	etcPresent.Lock()
	defer etcPresent.Unlock()
	if etcPresent.entries == nil || time.Since(etcPresent.at) >= etcRecheck {
		etcPresent.entries = etcEntries(etcFiles)
		etcPresent.at = time.Now()
	}
	return slices.Clone(etcPresent.entries)
}

// etcEntries turns the allowlist into view entries (those that exist).
func etcEntries(names []string) []EtcEntry {
	var out []EtcEntry
	for _, f := range names {
		if _, err := os.Lstat(f); err != nil {
			continue
		}
		out = append(out, EtcEntry{Path: strings.TrimPrefix(f, "/etc/"), Src: f})
	}
	return out
}
