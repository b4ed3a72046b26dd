package supervisor

import (
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"toybox/vat/store"
	"toybox/vat/switches"
	"toybox/vat/wall"
	"toybox/vat/words"
)

// wallFacts are what one spawn of a vat shares with the host beyond its
// own folders, or that it runs without a wall: its wall line says them.
type wallFacts struct {
	unwalled bool
	asToybox bool // unwalled, as the supervisor's own user
	docker   bool // unwalled, and a Docker socket is reachable from it
	shares   []switches.Share
	state    []string
}

// shareNames is the detail of the word "not walled: shares <names>".
func (f wallFacts) shareNames() string {
	var names []string
	for _, sh := range f.shares {
		names = append(names, sh.Name)
	}
	return strings.Join(names, ", ")
}

// line is the vat's wall line in lang: what it can read and change
// beyond its own folders, then, for a walled vat, the fixed sentence of
// what no wall covers.
func (f wallFacts) line(lang string) string {
	if f.unwalled {
		out := words.LineUnwalled.In(lang)
		if f.asToybox {
			out += " " + words.LineUnwalledAsToybox.In(lang)
		}
		if f.docker {
			out += " " + words.LineDocker.In(lang)
		}
		// Its environment holds the credential sets all the same; a
		// shared folder is not bound, its user reaches it or not.
		for _, sh := range f.shares {
			if len(sh.Env) > 0 {
				out += " " + credentialsLine(sh, lang)
			}
		}
		return out
	}
	var out []string
	for _, sh := range f.shares {
		switch {
		case len(sh.Env) > 0:
			out = append(out, credentialsLine(sh, lang))
		case len(sh.Entries) > 0:
			out = append(out, words.LineSharesEntries.In(lang, sh.Name, strings.Join(sh.Entries, ", "), sh.Folder))
		default:
			out = append(out, words.LineSharesFolder.In(lang, sh.Name, sh.Folder))
		}
	}
	for _, d := range f.state {
		out = append(out, words.LineStateFolder.In(lang, d))
	}
	return strings.Join(append(out, words.LineNotCovered.In(lang)), " ")
}

// credentialsLine says the credential set sh in lang: its name and its
// keys.
func credentialsLine(sh switches.Share, lang string) string {
	keys := make([]string, 0, len(sh.Env))
	for k := range sh.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return words.LineSharesCredentials.In(lang, sh.Name, strings.Join(keys, ", "))
}

// wallShares are the shared folders a wall binds (credential sets are
// environment, not binds).
func wallShares(shares []switches.Share) []wall.Share {
	var out []wall.Share
	for _, sh := range shares {
		if sh.Folder != "" {
			out = append(out, wall.Share{Name: sh.Name, Folder: sh.Folder, Entries: slices.Clone(sh.Entries)})
		}
	}
	return out
}

// shareEnv adds the credential sets of shares to env (the operator's
// values win over the owner's).
func shareEnv(env map[string]string, shares []switches.Share) {
	for _, sh := range shares {
		for k, v := range sh.Env {
			env[k] = v
		}
	}
}

// defaultDockerSockets are where Docker's socket is on a Debian host.
var defaultDockerSockets = []string{"/run/docker.sock", "/var/run/docker.sock"}

// dockerReachable reports whether a process of uid, gid and groups may
// connect to one of the Docker sockets (uid < 0: this process's own
// identity, asked of the kernel). Connecting to a unix socket needs write
// permission on it.
func (s *Supervisor) dockerReachable(uid, gid int, groups []int) bool {
	// The usual places too: naming another socket takes none away.
	for _, p := range slices.Concat(defaultDockerSockets, s.cfg.DockerSockets) {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			continue
		}
		if uid < 0 {
			if unix.Access(p, unix.W_OK) == nil {
				return true
			}
			continue
		}
		perm := st.Mode & 0o002
		switch {
		case int(st.Uid) == uid:
			perm = st.Mode & 0o200
		case int(st.Gid) == gid || slices.Contains(groups, int(st.Gid)):
			perm = st.Mode & 0o020
		}
		if perm != 0 || uid == 0 {
			return true
		}
	}
	return false
}

// unwalledIDs are the host ids an unwalled spawn of rec runs as: uid -1
// when it runs as the supervisor's own user. Its one supplementary group
// is the code group, to read its code.
func (s *Supervisor) unwalledIDs(rec store.Record) (uid, gid int, groups []int) {
	uid, gid = s.ids(rec)
	if uid < 0 {
		return uid, gid, nil
	}
	if g := s.cfg.Store.CodeGID(); g > 0 {
		groups = []int{g}
	}
	return uid, gid, groups
}

// stateFolders are the operator's state folders of vat id that exist as
// real folders now (each is checked again when its wall is planned).
func (s *Supervisor) stateFolders(id string) []string {
	var out []string
	for _, d := range s.cfg.Switches.StateFolders(id) {
		fi, err := os.Lstat(d)
		switch {
		case err == nil && fi.IsDir():
			out = append(out, d)
		case err == nil:
			s.log.Warn("a state folder in the operator's table is not a real folder: not bound", keyVat, id, "folder", d)
		}
	}
	return out
}
