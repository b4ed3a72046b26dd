package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"toybox/schema"
	"toybox/vat/doors"
	"toybox/vat/grant"
	"toybox/vat/manifest"
	"toybox/vat/wall"
	"toybox/vat/wall/entry"
	"toybox/vat/words"
)

// instance is one run of a vat on one version of its code: a loop that
// spawns, waits for readiness, watches and restarts with backoff until it is
// stopped or gives up.
type instance struct {
	s      *Supervisor
	v      *vat
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	readyOnce sync.Once
	readyDone chan struct{}
	readyErr  error

	sock      string
	listen    int // the app's TCP port, which toybox-entry relays sock to; 0: the app serves sock itself
	transport *http.Transport
	proxy     *httputil.ReverseProxy
	plog      *proxyLog     // its proxy's records, rate-limited
	mcp       *mcpRoute     // its MCP endpoint; nil when it is no MCP server
	requests  chan struct{} // public requests in flight (MaxVatRequests)
	clientsMu sync.Mutex
	clients   map[string]int // public requests in flight by client (MaxClientVatRequests)
	stopping  words.Word     // while it is stopped: Stopping (to start again), OffRemoved or OffStopped; Unknown while it runs (guarded by v.mu)
	serving   words.Word     // the word of its app once it listened (guarded by v.mu)
	// unanswered is set while answered has said NotAnswering: a response
	// of the app's then takes v.mu to bring its word back.
	unanswered atomic.Bool
}

// answering is the RoundTripper of the instance's proxy: an answer of the
// app's, on a new connection or one kept open (which dials nothing), says
// it answers.
type answering struct{ in *instance }

func (a answering) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := a.in.transport.RoundTrip(r)
	if err == nil && a.in.unanswered.Load() {
		a.in.answered(nil)
	}
	return resp, err
}

// running is one spawned process of an instance.
type running struct {
	proc    Process
	gv      *grant.Vat
	doors   *doors.Granted // nil: no doors
	word    words.Word
	gone    chan struct{}
	exitErr error
	// closeAfter is closed once the process is gone (the wall's output
	// pipe).
	closeAfter *os.File
	// entryEnded is closed once toybox-entry's capability connection
	// ends (nil: no entry).
	entryEnded <-chan struct{}
}

// entryLostGrace is how long a wall whose toybox-entry's capability
// connection ended has to end on its own (its app exited, and the entry
// with it; or the entry saw the loss and ends the wall) before the
// supervisor ends it.
const entryLostGrace = 2 * time.Second

// entryLostText is the reason a wall was ended for the loss of its entry's
// capability connection.
const entryLostText = "toybox-entry's capability connection to the supervisor ended while the app ran (every connect of the vat's would have failed): its wall was ended to start again"

// launch starts a new instance of v (the caller holds v.op) and returns it.
func (s *Supervisor) launch(v *vat) *instance {
	ctx, cancel := context.WithCancel(s.ctx)
	in := &instance{
		s: s, v: v, ctx: ctx, cancel: cancel, done: make(chan struct{}), readyDone: make(chan struct{}),
		sock:     filepath.Join(s.cfg.Store.RunDir(v.id), "app.sock"),
		requests: make(chan struct{}, MaxVatRequests),
	}
	in.transport = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := dialApp(ctx, in.sock)
			in.answered(err)
			return c, err
		},
		MaxIdleConnsPerHost:    16,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: maxVatHeaderBytes,
		ResponseHeaderTimeout:  vatHeaderTimeout,
	}
	in.plog = newProxyLog(s.log, string(v.id))
	in.proxy = proxyLogged(string(v.id), answering{in}, in.plog)
	v.mu.Lock()
	cfg := mcpOf(v.code, v.rec)
	in.listen = listenOf(v.code, v.rec)
	v.mcpErr = ""
	v.mu.Unlock()
	stdio := cfg != nil && cfg.Transport == manifest.TransportStdio
	if cfg != nil {
		in.mcp = newMCPRoute(in, *cfg)
	}
	if stdio {
		// The bridge in its wall serves it, on the socket the supervisor
		// holds.
		in.sock = s.bridgeSock(string(v.id))
	} else {
		s.closeBridge(v) // an upgrade made it something else
	}
	go in.loop()
	return in
}

func (in *instance) markReady(err error) {
	in.readyOnce.Do(func() {
		in.readyErr = err
		close(in.readyDone)
	})
}

// waitReady returns nil once the first spawn listens, or why it did not.
func (in *instance) waitReady() error {
	<-in.readyDone
	return in.readyErr
}

// stopAndWait stops the instance and waits until its process is gone.
func (in *instance) stopAndWait() {
	in.cancel()
	<-in.done
}

func (in *instance) update(f func(v *vat)) {
	in.v.mu.Lock()
	f(in.v)
	if in.stopping != words.Unknown {
		// Its app just started to listen, say, while a restart, an
		// upgrade or a removal stops it: it is not serving.
		in.v.word = in.stopping
	}
	in.v.mu.Unlock()
}

// markStopping says why the vat stops: to start again (words.Stopping, an
// upgrade's rollback included) or for good (words.OffRemoved, or
// words.OffStopped for a new install that could not be recorded); v.mu
// must be held.
func (in *instance) markStopping(w words.Word) {
	in.stopping = w
	in.v.word = w
}

func (in *instance) loop() {
	s, v := in.s, in.v
	defer close(in.done)
	defer in.transport.CloseIdleConnections()
	if in.mcp != nil {
		defer in.mcp.close()
	}
	defer in.plog.flush()
	backoff := s.cfg.BackoffMin
	crashes := 0
	for {
		started := time.Now()
		r, offWord, err := s.spawn(in.ctx, v)
		if err != nil {
			if in.ctx.Err() != nil {
				in.markReady(errStopped)
				return
			}
			in.update(func(v *vat) {
				v.word, v.lastError, v.pid, v.tier = offWord, err.Error(), 0, ""
				v.egress, v.egressWhy = words.EgressNone, ""
			})
			s.log.Error("vat launch refused", keyVat, v.id, keyWord, offWord.String(), keyErr, err)
			in.markReady(err)
			return
		}
		in.update(func(v *vat) {
			v.pid, v.tier = r.proc.Pid(), r.proc.Tier()
			v.egress, v.egressWhy = egressOf(r.proc)
		})
		readyErr := in.waitListening(r)
		s.observer().Spawned(string(v.id), time.Since(started), readyErr == nil)
		if readyErr == nil {
			in.update(func(v *vat) { v.word, in.serving = r.word, r.word })
			s.log.Info("vat serving", keyVat, v.id, keyCode, s.status(v).Code, keyPid, r.proc.Pid(), keyTier, r.proc.Tier(), keyWord, r.word.String(), "ready_ms", time.Since(started).Milliseconds())
			in.markReady(nil)
		} else if in.ctx.Err() == nil {
			in.update(func(v *vat) { v.lastError = readyErr.Error() })
			_ = r.proc.Stop(s.cfg.StopGrace)
		}
		lost, stopped := in.watch(r)
		if stopped {
			r.revoke("stopped")
			in.update(func(v *vat) {
				v.pid = 0
				// Asked to stop (a stop, restart, upgrade or shutdown):
				// the status must not read as a crash of its own.
				v.lastExit = exitText(r.exitErr) + stoppedByToybox
				v.doors = nil
				v.egress, v.egressWhy = words.EgressNone, ""
			})
			s.log.Info("vat stopped", keyVat, v.id, keyExit, exitText(r.exitErr))
			in.markReady(errStopped)
			return
		}
		r.revoke("exited")
		exit := exitText(r.exitErr)
		in.update(func(v *vat) { v.pid, v.lastExit, v.doors = 0, exit, nil })
		if lost {
			in.update(func(v *vat) { v.lastError = entryLostText })
			s.log.Error("vat's wall ended: its entry lost its capability connection", keyVat, v.id, keyExit, exit)
		}
		if errors.Is(r.exitErr, wall.ErrBwrap) {
			// The wall was never built (bubblewrap could not bind a
			// folder or run toybox-entry): no app ran, and a restart
			// would fail the same way. Off, with bubblewrap's reason.
			in.update(func(v *vat) { v.word, v.lastError = words.OffWall, "its wall could not be built: "+exit })
			s.log.Error("vat off", keyVat, v.id, keyWord, words.OffWall.String(), keyExit, exit)
			in.markReady(fmt.Errorf("%w: %s", wall.ErrBwrap, exit))
			return
		}
		// Out of memory: off, with its limit, until its backoff ends.
		offWord, detail := words.Restarting, ""
		if errors.Is(r.exitErr, wall.ErrOutOfMemory) {
			offWord = words.OffMemory
			in.v.mu.Lock()
			detail = mib(in.v.inForce.MemoryMiB)
			in.v.mu.Unlock()
		}
		s.log.Warn("vat exited", keyVat, v.id, keyExit, exit)
		switch {
		case readyErr == nil:
			readyErr = fmt.Errorf("it exited (%s)", exit)
		case !errors.Is(readyErr, errExitedEarly): // that one says how
			readyErr = fmt.Errorf("%w (%s)", readyErr, exit)
		}
		in.markReady(readyErr)
		if time.Since(started) >= s.cfg.StableAfter {
			crashes, backoff = 0, s.cfg.BackoffMin
		}
		crashes++
		if crashes > s.cfg.MaxRestarts {
			in.update(func(v *vat) {
				v.word, v.wordDetail = words.OffStopped, ""
				if offWord == words.OffMemory {
					v.word, v.wordDetail = offWord, detail
				}
				v.lastError = fmt.Sprintf("it stopped %d times in a row; the last time: %s", crashes, exit)
			})
			s.log.Error("vat off", keyVat, v.id, keyWord, words.OffStopped.String(), keyExit, exit)
			return
		}
		in.update(func(v *vat) { v.word, v.wordDetail = offWord, detail; v.restarts++ })
		select {
		case <-time.After(backoff):
		case <-in.ctx.Done():
			in.update(func(v *vat) { v.word = words.OffStopped })
			return
		}
		backoff = min(backoff*2, s.cfg.BackoffMax)
	}
}

// watch waits until r's process is gone and reports whether it went for
// the loss of toybox-entry's capability connection (the entry ended the
// wall, exiting with entry.ExitLost, or the wall still ran entryLostGrace
// after the loss and the supervisor ended it), or whether the instance was
// stopped (the process is gone then too).
func (in *instance) watch(r *running) (lost, stopped bool) {
	ended := r.entryEnded
	var grace <-chan time.Time
	for {
		select {
		case <-r.gone:
			return lost || ended == nil && r.entryEnded != nil && exitCode(r.exitErr) == entry.ExitLost, false
		case <-in.ctx.Done():
			_ = r.proc.Stop(in.s.cfg.StopGrace)
			<-r.gone
			return false, true
		case <-ended:
			ended = nil
			grace = time.After(entryLostGrace)
		case <-grace:
			grace = nil
			lost = true
			in.s.log.Error("toybox-entry's capability connection ended; ending its wall", keyVat, in.v.id)
			go func() { _ = r.proc.Stop(in.s.cfg.StopGrace) }()
		}
	}
}

// exitCode is the exit status err carries, or -1.
func exitCode(err error) int {
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		return ee.ExitCode()
	}
	return -1
}

// answered takes what a public request's dial to the app found: nothing
// accepting on its socket (it is gone, replaced, or no longer listened on)
// turns a serving word into NotAnswering, with the reason; a dial that
// connects, or an answer on a connection kept open, brings the serving
// word back. A busy app (a full backlog) or a
// request given up is neither.
func (in *instance) answered(err error) {
	v := in.v
	if v == nil {
		return
	}
	gone := errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, ErrAppSocket)
	if err != nil && !gone {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case v.run != in:
	case err == nil && v.word == words.NotAnswering && in.serving.Serving():
		v.word = in.serving
		in.unanswered.Store(false)
		in.s.log.Info("vat answering again", keyVat, v.id, keyWord, v.word.String())
	case err != nil && v.word.Serving():
		v.word = words.NotAnswering
		in.unanswered.Store(true)
		v.lastError = "its app stopped answering on $TOYBOX_LISTEN: " + err.Error()
		in.s.log.Warn("vat not answering", keyVat, v.id, keyErr, err)
	}
}

// listensOn names where the app listens, for the reasons it is not ready.
func (in *instance) listensOn() string {
	if in.listen != 0 {
		return fmt.Sprintf("its port %d ($PORT; toybox-entry makes $TOYBOX_LISTEN once it accepts)", in.listen)
	}
	return "$TOYBOX_LISTEN"
}

// waitListening polls the app's socket until it accepts a connection, the
// process exits, the instance or the supervisor is stopped or ReadyTimeout
// passes.
func (in *instance) waitListening(r *running) error {
	deadline := time.NewTimer(in.s.cfg.ReadyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(in.ctx, 200*time.Millisecond)
		c, err := dialApp(ctx, in.sock)
		cancel()
		if err == nil {
			_ = c.Close()
			if in.mcp == nil || in.mcp.cfg.Transport != manifest.TransportStdio || bridgeAnswers(in.ctx, in) {
				return nil
			}
			err = errors.New("its MCP bridge does not answer yet")
		}
		if errors.Is(err, ErrAppSocket) {
			return fmt.Errorf("%w: %w", ErrNotReady, err)
		}
		select {
		case <-r.gone:
			// Why it ended (a wall that could not be built says so
			// here) is what the operator needs.
			return fmt.Errorf("%w: %w on %s (%s)", ErrNotReady, errExitedEarly, in.listensOn(), exitText(r.exitErr))
		case <-in.ctx.Done():
			return errStopped
		case <-in.s.stopped:
			// Shutdown waits for the operation this wait may hold (an
			// install): it must not wait out ReadyTimeout.
			return errStopped
		case <-deadline.C:
			return fmt.Errorf("%w: nothing listened on %s within %s", ErrNotReady, in.listensOn(), in.s.cfg.ReadyTimeout)
		case <-tick.C:
		}
	}
}

// mib is n MiB as the words show it ("512 MiB").
func mib(n int64) string { return fmt.Sprintf("%d MiB", n) }

// stoppedByToybox follows the exit of a process toybox asked to stop.
const stoppedByToybox = " (stopped by toybox)"

// errExitedEarly is waitListening's: the app ended before it listened
// (the error says how it ended).
var errExitedEarly = errors.New("it exited before listening")

// exitText is how a process ended, with what the wall added to its exit
// status (bubblewrap's own refusal and its fix) kept.
func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by signal " + ws.Signal().String()
		}
	}
	return err.Error()
}

// spawn starts one process of v: walled through the Launcher, or unwalled
// only when the switches say so. On error it returns the off word to show.
// Every descriptor and the grant are released on every error path.
func (s *Supervisor) spawn(ctx context.Context, v *vat) (r *running, off words.Word, err error) {
	v.mu.Lock()
	code, rec, g, dropped := v.code, v.rec, v.grant, v.dropped
	v.mu.Unlock()
	dec, err := s.cfg.Switches.For(string(v.id), rec.Code)
	if err != nil {
		return nil, words.OffStopped, fmt.Errorf("reading the wall switches: %w", err)
	}
	if dec.Off {
		return nil, dec.Word, errors.New(dec.Reason)
	}
	off = words.OffStopped
	if dec.Walled {
		off = words.OffWall
	}
	if code.Manifest == nil {
		return nil, off, errors.New("no code loaded")
	}
	// The fix for a vat that runs only walled: the owner's own choice
	// is undone by the owner; any other switch is the operator's.
	putBack := "put it back with POST /" + string(v.id) + "/walls?walled=true"
	if dec.Word != words.NotWalledChoice {
		putBack = "it runs without one here: " + dec.Reason
	}
	if cfg := mcpOf(code, rec); cfg != nil && cfg.Transport == manifest.TransportStdio && !dec.Walled {
		// The bridge is toybox-entry's, which runs only in a wall.
		return nil, words.OffStopped, errors.New("a stdio MCP server runs only inside its wall (its bridge is toybox-entry's): " + putBack)
	}
	if port := listenOf(code, rec); port != 0 && !dec.Walled {
		// So is the relay to its port; unwalled, the app would listen
		// on the host's own port.
		return nil, words.OffStopped, fmt.Errorf("an app that listens on a TCP port (%d) runs only inside its wall (the relay to its port is toybox-entry's): %s", port, putBack)
	}
	if err := checkPackageCode(code); err != nil {
		return nil, words.OffChanged, err
	}
	uid, gid := s.ids(rec)
	lim := s.limitsFor(rec)
	// The data folder's own file system, mounted before its folders are
	// handed to the vat's uid (that hands over the file system's root).
	// The folder under it is the uid's too: while toybox is stopped it
	// is what shows, and a damaged record's uid is learnt from its owner.
	var diskBytes int64
	diskWhy := ""
	if lim.DiskBytes == 0 {
		// No disk limit now (--wall-disk-mib 0), but one held it
		// before: its data lies in its image, and the bare folder
		// under the mount point is empty. The image is mounted as it
		// is, and its size is the limit in force (its status says so).
		if size := s.cfg.Disks.Size(string(v.id)); size > 0 {
			lim.DiskBytes = size
			s.log.Info("no disk limit set, but the vat's data lies in its disk image: mounted as it is", keyVat, v.id, "disk_mib", size>>20)
		}
	}
	if lim.DiskBytes > 0 {
		if err := s.cfg.Disks.Support(); err != nil {
			// Its data lies in its image: the bare folder under the
			// mount point is empty, and what the vat wrote there would
			// be hidden by the next mount.
			if size := s.cfg.Disks.Size(string(v.id)); size > 0 {
				return nil, words.OffStopped, fmt.Errorf("its data lies in its disk image (%d MiB), which this supervisor cannot mount: %w; it stays off rather than run on an empty data folder (make room on the state disk, then restart it: POST /%s/restart)", size>>20, err, v.id)
			}
			diskWhy = err.Error()
		} else if err := s.cfg.Store.PrepareDirs(v.id, uid, gid); err != nil {
			return nil, off, err
		} else if diskBytes, err = s.cfg.Disks.Mount(string(v.id), s.cfg.Store.DataDir(v.id), lim.DiskBytes); err != nil {
			return nil, off, fmt.Errorf("giving its data folder its disk limit (%d MiB): %w", lim.DiskBytes>>20, err)
		}
	}
	if err := s.cfg.Store.PrepareDirs(v.id, uid, gid); err != nil {
		return nil, off, err
	}
	// Its run folder is bound read-write too: with a disk limit in force,
	// a file system of its own as well, for this spawn (emptied by
	// PrepareDirs, gone when the spawn ends).
	runDir, runMounted := s.cfg.Store.RunDir(v.id), false
	if diskBytes > 0 {
		if err := s.cfg.Disks.MountRun(runDir, uid, gid); err != nil {
			return nil, off, fmt.Errorf("giving its run folder a file system of its own: %w", err)
		}
		runMounted = true
	}
	unmountRun := func() {
		if !runMounted {
			return
		}
		if err := s.cfg.Disks.UnmountRun(runDir); err != nil {
			s.log.Warn("unmounting the run folder", keyVat, v.id, keyErr, err)
		}
	}
	defer func() {
		if err != nil {
			unmountRun()
		}
	}()
	// Doors: only a set the manifest names, checked again against the
	// table this supervisor read at start; fresh capabilities per spawn.
	var gd *doors.Granted
	var doorSet func() schema.DoorSet
	if len(code.Manifest.Doors) > 0 {
		if err := s.cfg.Doors.CheckManifest(v.id, code.Manifest.Doors); err != nil {
			return nil, words.OffStopped, err // not the wall's fault: the table refuses
		}
		gd = s.cfg.Doors.Grant(string(v.id), s.log)
		doorSet = gd.DoorSet
	}
	gv, err := grant.NewVat(grant.VatConfig{ID: v.id, Grants: g, Upstream: s.cfg.Upstream, Doors: doorSet, Logger: s.log, Dropped: dropped, OnDecision: s.onDecision(string(v.id))})
	if err != nil {
		if gd != nil {
			gd.Revoke()
		}
		return nil, off, fmt.Errorf("building its grant: %w", err)
	}
	s.tookGrant(v, gv, g)
	r = &running{gv: gv, doors: gd, gone: make(chan struct{})}
	var facts wallFacts
	spawned := r // the named result is nil on an error return
	defer func() {
		if err != nil {
			spawned.revoke("stopped")
		}
	}()
	if dec.Walled {
		if s.cfg.Launch == nil {
			return nil, off, errors.New("no wall launcher configured")
		}
		var out *os.File
		r.proc, out, r.entryEnded, err = s.spawnWalled(ctx, v, code, rec, g, gv, lim)
		if err != nil {
			return nil, off, err
		}
		r.closeAfter = out
		r.word = words.FromTier(r.proc.Tier())
		if r.word == words.Unknown {
			_ = r.proc.Stop(0)
			go func() { _ = r.proc.Wait(); _ = out.Close() }()
			return nil, off, fmt.Errorf("the wall reported an unknown tier %q", r.proc.Tier())
		}
		facts = wallFacts{shares: s.cfg.Switches.Shares(string(v.id)), state: s.stateFolders(string(v.id))}
		if len(facts.shares) > 0 {
			r.word = words.NotWalledShares
		}
	} else {
		s.log.Warn("vat runs without its wall", keyVat, v.id, keyReason, dec.Reason, keyWord, dec.Word.String())
		r.proc, err = s.spawnUnwalled(v, code, rec, gv)
		if err != nil {
			return nil, off, err
		}
		r.word = dec.Word
		vuid, vgid, groups := s.unwalledIDs(rec)
		facts = wallFacts{unwalled: true, asToybox: vuid < 0, docker: s.dockerReachable(vuid, vgid, groups), shares: s.cfg.Switches.Shares(string(v.id))}
		if r.word == words.NotWalledNoBwrap && facts.docker {
			r.word = words.NotWalledNoBwrapDocker
		}
	}
	go func() {
		r.exitErr = r.proc.Wait()
		if r.closeAfter != nil {
			_ = r.closeAfter.Close()
		}
		unmountRun()
		close(r.gone)
	}()
	inForce, unlimited := s.inForce(r.proc, lim, diskBytes, diskWhy)
	v.mu.Lock()
	v.inForce, v.unlimited = inForce, unlimited
	v.facts = facts
	if gd != nil {
		v.doors = gd.Names()
	}
	v.mu.Unlock()
	return r, 0, nil
}

// revoke ends the spawn's capabilities: its Vat (egress) and its doors.
func (r *running) revoke(why string) {
	r.gv.Revoke()
	if r.doors != nil {
		r.doors.RevokeBecause(why)
	}
}

// pipeToRing returns the write end of a pipe whose output lands in ring.
// The caller closes the write end once the child has it.
func pipeToRing(rg *ring) (*os.File, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	go func() {
		defer pr.Close()
		buf := make([]byte, 32<<10)
		pc := newPace(outputRate, outputBurst)
		for {
			n, err := pr.Read(buf)
			if n > 0 {
				_, _ = rg.Write(buf[:n])
				pc.take(n)
			}
			if err != nil {
				return
			}
		}
	}()
	return pw, nil
}
