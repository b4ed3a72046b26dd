package supervisor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"toybox/labels"
	"toybox/schema/wire"
	"toybox/vat/grant"
	"toybox/vat/manifest"
	"toybox/vat/procstatus"
	"toybox/vat/sockpair"
	"toybox/vat/store"
	"toybox/vat/wall"
)

// capPair makes a socketpair: mine is served with the Vat bootstrap (a
// goroutine owns it from here), theirs goes to the child. The caller owns
// theirs and must close it. entry: theirs goes to toybox-entry, which gets
// connected sockets themselves (grant.Vat.ServeEntry); an app never does.
// The channel is closed once mine is served no more (the child's end went,
// the vat was revoked, or ctx ended).
func (s *Supervisor) capPair(ctx context.Context, gv *grant.Vat, name string, entry bool) (*os.File, <-chan struct{}, error) {
	// Theirs is bound (sockpair.Pair), so the vat cannot bind it to a name
	// of its choosing in the supervisor's network namespace.
	uc, theirs, err := sockpair.Pair(name)
	if err != nil {
		return nil, nil, err
	}
	serve := gv.Serve
	if entry {
		serve = gv.ServeEntry
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		_ = serve(ctx, wire.NewConn(uc, false))
	}()
	return theirs, ended, nil
}

// spawnWalled starts v in its wall. The returned output pipe must stay open
// until the process is gone (the wall copies the app's stderr into it); the
// caller closes it then. The channel is closed once toybox-entry's
// capability connection ends (nil when the wall has no entry).
func (s *Supervisor) spawnWalled(ctx context.Context, v *vat, code store.Code, rec store.Record, g []labels.Set, gv *grant.Vat, lim Limits) (Process, *os.File, <-chan struct{}, error) {
	if s.entryErr != nil {
		return nil, nil, nil, s.entryErr
	}
	m := code.Manifest
	entryCap, entryEnded, err := s.capPair(ctx, gv, "entry-cap", true)
	if err != nil {
		return nil, nil, nil, err
	}
	appCap, _, err := s.capPair(ctx, gv, "app-cap", false)
	if err != nil {
		_ = entryCap.Close()
		return nil, nil, nil, err
	}
	out, err := pipeToRing(v.logs)
	if err != nil {
		_ = entryCap.Close()
		_ = appCap.Close()
		return nil, nil, nil, err
	}
	env := map[string]string{}
	for _, k := range m.Env {
		if val, ok := rec.Env[k]; ok {
			env[k] = val
		}
	}
	owned := maps.Clone(env)
	env = packageEnv(code, env)
	if u := s.mcpPublicURL(string(v.id), code, rec); u != "" {
		env[mcpPublicURLEnv] = u
	}
	maps.Copy(env, mcpEnv(code, rec))
	shares := s.cfg.Switches.Shares(string(v.id))
	shareEnv(env, shares)
	// sandbox.files binds the owner's values alone: a value toybox or the
	// operator's table set (a shared credential set wins over the owner's)
	// is environment, never a folder of the vat's.
	maps.DeleteFunc(owned, func(k, val string) bool { return env[k] != val })
	spec := wall.Spec{
		ID:         v.id,
		Host:       s.walls,
		InstallDir: code.Dir,
		Command:    m.Command,
		DataDir:    s.cfg.Store.DataDir(v.id),
		RunDir:     s.cfg.Store.RunDir(v.id),
		StateDir:   s.cfg.Store.StateDir(),
		Env:        env,
		Files:      wallFiles(m.Sandbox.Files.Read, m.Sandbox.Files.Write, m.Sandbox.Files.OAuthDir, owned),
		OwnEnvFile: m.OwnEnvFile,
		Inotify:    m.Sandbox.Inotify,
		Net:        m.Net(g),
		ListenPort: listenOf(code, rec),
		EntryPath:  s.cfg.EntryPath,
		Entry:      s.entry,
		Bwrap:      s.cfg.Bwrap,
		Shares:     wallShares(shares),
		State:      s.stateFolders(string(v.id)),
		EntryCap:   entryCap,
		AppCap:     appCap,
		Stdout:     out,
		Stderr:     out,
		NoSeccomp:  s.cfg.NoSeccompTable(),
		TmpBytes:   s.cfg.WallTmpBytes,
		MaxTasks:   s.cfg.WallMaxTasks,
		Cgroups:    s.cfg.Cgroups,
		Limits:     wallLimits(lim),
	}
	if uid, gid := s.ids(rec); uid >= 0 {
		spec.UID, spec.GID = uid, gid
		spec.CodeGroup = s.cfg.Store.CodeGID()
	}
	if cfg := mcpOf(code, rec); cfg != nil && cfg.Transport == manifest.TransportStdio {
		if spec.MCP, err = s.bridgeSpec(v, cfg); err != nil {
			_ = out.Close()
			_ = entryCap.Close()
			_ = appCap.Close()
			return nil, nil, nil, err
		}
	}
	p, err := s.cfg.Launch(ctx, spec, s.log)
	if err != nil {
		_ = out.Close()
		return nil, nil, nil, fmt.Errorf("starting its wall: %w", err)
	}
	if spec.Net.None {
		entryEnded = nil // no entry runs: its capability is never used
	}
	return p, out, entryEnded, nil
}

// wallFiles are the files a manifest's sandbox.files names: the values
// of owned (the owner's own) under its keys.
func wallFiles(read, write, oauth []string, owned map[string]string) wall.Files {
	pick := func(keys []string) []string {
		var out []string
		for _, k := range keys {
			if p := owned[k]; p != "" {
				out = append(out, filepath.Clean(p))
			}
		}
		return out
	}
	return wall.Files{Read: pick(read), Write: pick(write), OAuthDir: pick(oauth)}
}

// unwalledProc is a vat run without a wall, only by the switches' choice.
type unwalledProc struct {
	cmd  *exec.Cmd
	uid  int // the vat's own host uid; 0 when it shares one
	done chan struct{}
}

func (p *unwalledProc) Pid() int     { return p.cmd.Process.Pid }
func (p *unwalledProc) Tier() string { return "" }

// Wait waits for the app, then ends what it left behind: no PID namespace
// holds an unwalled app's children, so its process group is killed, and
// when the vat has a uid of its own, every process of that uid (a child
// that left the group with setsid too). They would outlive the vat, keep
// its output pipe, and under a uid handed to the next vat read that vat's
// data.
func (p *unwalledProc) Wait() error {
	err := p.cmd.Wait()
	_ = unix.Kill(-p.cmd.Process.Pid, unix.SIGKILL)
	if p.uid > 0 {
		killUID(p.uid)
	}
	close(p.done)
	return err
}

// killUID kills every process of this PID namespace whose real, effective
// or saved uid is uid, until none is left (or a few hundred rounds of a
// process that forks as fast as it is killed). Walls have PID namespaces
// of their own: a walled instance's processes are never touched here.
func killUID(uid int) {
	ours, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return
	}
	for range 300 {
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return
		}
		found := false
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || !processOf(pid, uid) {
				continue
			}
			if ns, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err != nil || ns != ours {
				continue
			}
			found = true
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		if !found {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// processOf reports whether process pid (not a zombie) runs as uid.
func processOf(pid, uid int) bool {
	st, err := procstatus.Read(pid)
	if err != nil || strings.Contains(st["State"], "Z") {
		return false
	}
	want := strconv.Itoa(uid)
	f := st.Fields("Uid")
	return len(f) >= 3 && (f[0] == want || f[1] == want || f[2] == want)
}

func (p *unwalledProc) Stop(grace time.Duration) error {
	pgid := p.cmd.Process.Pid
	_ = unix.Kill(-pgid, unix.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
	}
	_ = unix.Kill(-pgid, unix.SIGKILL)
	<-p.done
	return nil
}

// spawnUnwalled runs the app directly: same code, data and runtime folders,
// the same fd 3, no namespaces. It still drops to the vats' uid when the
// supervisor is root, and gets no proxy (it has the host's network).
func (s *Supervisor) spawnUnwalled(v *vat, code store.Code, rec store.Record, gv *grant.Vat) (Process, error) {
	m := code.Manifest
	argv0 := m.Command[0]
	if !filepath.IsAbs(argv0) {
		argv0 = filepath.Join(code.Dir, argv0)
	}
	appCap, _, err := s.capPair(s.ctx, gv, "app-cap", false)
	if err != nil {
		return nil, err
	}
	defer appCap.Close()
	out, err := pipeToRing(v.logs)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	data, run := s.cfg.Store.DataDir(v.id), s.cfg.Store.RunDir(v.id)
	env := []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + data,
		"TMPDIR=" + data,
		"TOYBOX_VAT=" + string(v.id),
		"TOYBOX_DATA=" + data,
		"TOYBOX_LISTEN=" + filepath.Join(run, "app.sock"),
	}
	vals := map[string]string{}
	for _, k := range m.Env {
		if val, ok := rec.Env[k]; ok {
			vals[k] = val
		}
	}
	vals = packageEnv(code, vals)
	shareEnv(vals, s.cfg.Switches.Shares(string(v.id)))
	var keys []string
	for k, val := range vals {
		keys = append(keys, k+"="+val)
	}
	if u := s.mcpPublicURL(string(v.id), code, rec); u != "" {
		keys = append(keys, mcpPublicURLEnv+"="+u)
	}
	for k, val := range mcpEnv(code, rec) {
		keys = append(keys, k+"="+val)
	}
	sort.Strings(keys)
	env = append(env, keys...)
	// Without a wall, no_new_privs is what is left: no setuid program it
	// runs gains privileges. setpriv (util-linux) sets it and execs the
	// app, so the app's pid is setpriv's.
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return nil, fmt.Errorf("starting it without a wall: setpriv is not installed, and an unwalled vat runs only under no_new_privs (apt-get install util-linux): %w", err)
	}
	cmd := exec.Command(setpriv, append([]string{"--no-new-privs", "--", argv0}, m.Command[1:]...)...)
	cmd.Dir = code.Dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{appCap} // fd 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if uid, gid, groups := s.unwalledIDs(rec); uid >= 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
		for _, g := range groups {
			cmd.SysProcAttr.Credential.Groups = append(cmd.SysProcAttr.Credential.Groups, uint32(g))
		}
	}
	// As wall.Start does: nothing of the supervisor's reaches the app but
	// fds 0-3, not even a descriptor it inherited left open by its parent.
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return nil, fmt.Errorf("marking descriptors close-on-exec: %w", os.NewSyscallError("close_range", err))
	}
	if err := cmd.Start(); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("starting %s: %w", m.Command[0], err)
		}
		return nil, fmt.Errorf("starting it: %w", err)
	}
	p := &unwalledProc{cmd: cmd, done: make(chan struct{})}
	if s.cfg.UIDBase >= 0 && rec.UID > 0 {
		p.uid = rec.UID
	}
	return p, nil
}
