package wall

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

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

func (b *planner) passwd() string {
	return fmt.Sprintf("root:x:0:0:root:/nonexistent:/usr/sbin/nologin\nvat:x:%d:%d:toybox vat %s:%s:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		InsideUID, InsideGID, b.spec.ID, b.data)
}

// baseEtc is the content of every wall's /etc view before mountpoints:
// the allowlisted entries the host has, the synthesised group, hosts and
// hostname, and the link to the wall's own passwd.
func (h *Host) baseEtc() []EtcEntry {
	return append(h.presentEtcEntries(),
		EtcEntry{Path: "passwd", Link: PasswdPath},
		EtcEntry{Path: "group", Data: []byte(fmt.Sprintf("root:x:0:\nvat:x:%d:\nnogroup:x:65534:\n", InsideGID))},
		EtcEntry{Path: "hosts", Data: []byte("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")},
		// toybox-entry's DNS stub, where the wall has transparent egress
		// (entry.DNSAddr; elsewhere a lookup fails at once).
		EtcEntry{Path: "resolv.conf", Data: []byte("nameserver 127.0.0.53\noptions edns0\n")},
		EtcEntry{Path: "hostname", Data: []byte("toybox\n")},
	)
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
		b.p.EtcView = b.h.EtcViewDir(b.state, b.p.Etc)
		b.p.Ops[view].Src = b.p.EtcView
	}
}

// EtcViewDir is the folder of the /etc view holding entries: named by its
// content, so walls with the same /etc share one.
func (h *Host) EtcViewDir(stateDir string, entries []EtcEntry) string {
	// Every spawn asks, almost always for the entries it asked for last:
	// the last answer is kept, and given again for equal entries (a
	// comparison costs far less than the hash).
	h.etcViewLast.Lock()
	defer h.etcViewLast.Unlock()
	if h.etcViewLast.dir != "" && h.etcViewLast.state == stateDir && slices.EqualFunc(h.etcViewLast.entries, entries, EtcEntry.same) {
		return h.etcViewLast.dir
	}
	dir := etcViewDir(stateDir, entries)
	kept := slices.Clone(entries)
	for i := range kept {
		kept[i].Data = bytes.Clone(kept[i].Data) // the caller's bytes may change
	}
	h.etcViewLast.state, h.etcViewLast.entries, h.etcViewLast.dir = stateDir, kept, dir
	return dir
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

// presentEtcEntries is etcEntries(etcFiles), looked up at most once per
// etcRecheck.
func (h *Host) presentEtcEntries() []EtcEntry {
	h.etcPresent.Lock()
	defer h.etcPresent.Unlock()
	if h.etcPresent.entries == nil || time.Since(h.etcPresent.at) >= etcRecheck {
		h.etcPresent.entries = etcEntries(etcFiles)
		h.etcPresent.at = time.Now()
	}
	return slices.Clone(h.etcPresent.entries)
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
