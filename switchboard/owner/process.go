package owner

import (
	"path/filepath"
	"strings"
)

// Proc is what the check knows about one process holding a listening socket.
// Empty strings mean "could not be read"; the judgement treats an unreadable
// exe or cwd as a reason to refuse.
type Proc struct {
	PID  int
	UIDs [4]int   // real, effective, saved and filesystem uid (from /proc/<pid>/status)
	Comm string   // /proc/<pid>/comm (the kernel's task name, ≤ 15 bytes)
	Exe  string   // readlink /proc/<pid>/exe, " (deleted)" suffix removed
	Cwd  string   // readlink /proc/<pid>/cwd
	Argv []string // /proc/<pid>/cmdline split on NUL
	// Resolved holds the argv elements that name existing paths, with
	// symlinks resolved as the checker sees them; judged like Argv.
	Resolved []string
	Err      string // why Exe, Cwd or Argv could not be read, if one could not
}

// Role names a process of toybox's own machinery that a vat may never reach.
type Role string

// Roles, as they appear in refusal reasons.
const (
	RoleNone        Role = ""
	RoleSupervisor  Role = "the toybox supervisor"
	RoleSwitchboard Role = "the toybox switchboard"
	RoleEntry       Role = "toybox-entry (a wall's own process)"
	RoleBwrap       Role = "bubblewrap (a wall's own process)"
)

// roleNames maps an executable's base name to its role. Every toybox binary
// counts, whatever its subcommand, in this install or any other on the host.
var roleNames = map[string]Role{
	"toybox":       RoleSupervisor,
	"switchboard":  RoleSwitchboard,
	"toybox-entry": RoleEntry,
	"bwrap":        RoleBwrap,
}

// RoleOf reports which of toybox's own processes p is, by the base name of its
// executable, its argv[0], its argv[1] (a script run by an interpreter) and
// its kernel task name. Any one match is enough: a false match can only
// refuse.
func RoleOf(p Proc) Role {
	names := []string{p.Exe, p.Comm}
	if len(p.Argv) > 0 {
		names = append(names, p.Argv[0])
	}
	if len(p.Argv) > 1 {
		names = append(names, p.Argv[1])
	}
	for _, n := range names {
		if n == "" {
			continue
		}
		if r, ok := roleNames[filepath.Base(n)]; ok {
			return r
		}
	}
	return RoleNone
}

// UnderRoots reports whether anything about p lies under one of roots: its
// executable, its working directory, or an argv element — taken as a path
// (relative ones resolved against the working directory), or as the value of
// a "--flag=value" element. what names the part that matched ("working
// directory /var/lib/toybox/run/x") and root the root it lies under. roots
// must be clean absolute paths.
func UnderRoots(p Proc, roots []string) (what, root string, under bool) {
	check := func(kind, path string) bool {
		if path == "" {
			return false
		}
		for _, r := range roots {
			if pathUnder(path, r) {
				what, root = kind+" "+path, r
				return true
			}
		}
		return false
	}
	if check("executable", p.Exe) || check("working directory", p.Cwd) {
		return what, root, true
	}
	for _, a := range append(append([]string(nil), p.Argv...), p.Resolved...) {
		cands := []string{a}
		if _, v, ok := strings.Cut(a, "="); ok {
			cands = append(cands, v)
		}
		for _, c := range cands {
			if c == "" {
				continue
			}
			if !filepath.IsAbs(c) && strings.Contains(c, "/") && p.Cwd != "" {
				c = filepath.Join(p.Cwd, c)
			}
			if filepath.IsAbs(c) && check("argument", filepath.Clean(c)) {
				what = "argument " + a
				return what, root, true
			}
		}
	}
	return "", "", false
}

// pathUnder reports whether path is root or lies below it.
func pathUnder(path, root string) bool {
	path = filepath.Clean(path)
	if root == "/" {
		return strings.HasPrefix(path, "/")
	}
	return path == root || strings.HasPrefix(path, root+"/")
}
