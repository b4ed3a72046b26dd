package entry

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"toybox/schema/wire/quiet"
)

// Sockets put in place of the app's own. The switchboard keeps a
// duplicate of every socket it hands over, so that it can revoke it, and
// lets go of it when the connection is shut down both ways: a receiver
// ends a connection with shutdown(2). The app behind transparent egress
// knows nothing of that and merely closes its socket, which then stays
// connected, held by the switchboard alone, until the vat stops: every
// connection an app made and closed stayed open at the remote, and each
// counted against the switchboard's limits (a member's connection refuses
// new connects past limits.conns, the switchboard every vat's past
// limits.totalConns).
//
// So the entry keeps a duplicate of each socket it puts in place, and
// looks for it in the descriptor tables of the wall's processes (itself
// left out) while it holds any: a socket no process of the wall holds in
// two looks in a row was closed by the app (the second look lets a socket
// that was passed between processes over a unix socket arrive), and the
// entry ends it as a receiver does: shutdown(2) both ways, then close.
// Each held socket counts as a connection of the gate, as the proxy's do.

const (
	lookEvery = time.Second // between two looks, at the least
	// lookShare bounds the CPU the looks take: the wait after a look is
	// at least lookShare times as long as the look took (a wall of many
	// processes with many descriptors each is looked at less often).
	lookShare  = 50
	lookMisses = 2 // looks in a row that must miss a socket before it is ended
)

// placed holds the sockets put in place, by inode.
type placed struct {
	self int // this process, whose table holds the duplicates
	gate *gate
	log  *slog.Logger

	mu      sync.Mutex
	socks   map[uint64]*placedSock
	looking bool // a look is due (its timer runs)
	said    rateLog
}

type placedSock struct {
	fd     int
	misses int
	done   func() // gives the gate its place back
}

func newPlaced(g *gate, log *slog.Logger) *placed {
	return &placed{self: os.Getpid(), gate: g, log: log, socks: map[uint64]*placedSock{}}
}

// reserve holds a place for one more socket, or says why there is none.
func (p *placed) reserve() (func(), error) { return p.gate.take() }

// add takes fd, a socket now also in the app's table, with the place
// reserve held for it (done).
func (p *placed) add(fd int, done func()) {
	ino, err := quiet.Inode(fd)
	if err != nil {
		// Never seen: the socket's end is the app's close alone, as
		// before the entry kept them.
		_ = unix.Close(fd)
		done()
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.socks[ino]; old != nil {
		// The same socket again (it cannot be: each is new): keep one.
		_ = unix.Close(fd)
		done()
		return
	}
	p.socks[ino] = &placedSock{fd: fd, done: done}
	if !p.looking {
		p.looking = true
		time.AfterFunc(lookEvery, p.look)
	}
}

// look reads the wall's descriptor tables once and ends every socket
// missing from them lookMisses times in a row.
func (p *placed) look() {
	t0 := time.Now()
	held, err := wallSockets(p.self)
	var ended []*placedSock
	p.mu.Lock()
	if err == nil {
		for ino, s := range p.socks {
			if _, ok := held[ino]; ok {
				s.misses = 0
				continue
			}
			if s.misses++; s.misses >= lookMisses {
				ended = append(ended, s)
				delete(p.socks, ino)
			}
		}
	}
	left := len(p.socks)
	p.looking = left > 0
	if p.looking {
		time.AfterFunc(max(lookEvery, lookShare*time.Since(t0)), p.look)
	}
	p.mu.Unlock()
	if err != nil {
		if n, ok := p.said.allow(time.Now()); ok {
			p.log.Warn("reading the wall's descriptor tables failed: sockets the app closed stay open until a read succeeds", keyReason, err.Error(), "unlogged", n)
		}
	}
	for _, s := range ended {
		_ = unix.Shutdown(s.fd, unix.SHUT_RDWR)
		_ = unix.Close(s.fd)
		s.done()
	}
}

// wallSockets returns the inodes of the sockets that the processes of
// the wall (those /proc shows: the entry is the wall's pid 1) hold, self
// left out. A process that ended while it was read holds nothing. The
// entry's own helpers (the launcher's connector, spawner and relay,
// forked from the undumpable entry, by their names) are undumpable, so
// their tables may not be read (EACCES); they hold none of the sockets
// put in place. Any other table that cannot be read fails the look: a
// socket missing from what was read would not be known closed, and one
// still in use must never be ended. (An app that names a process of its
// own as a helper and makes it undumpable can only have its own
// connections ended.)
func wallSockets(self int) (map[uint64]struct{}, error) {
	held := map[uint64]struct{}{}
	pids, err := dirNames("/proc")
	if err != nil {
		return nil, err
	}
	for _, name := range pids {
		pid, err := strconv.Atoi(name)
		if err != nil || pid == self {
			continue
		}
		// Each thread's table: a thread may have one of its own (clone
		// without CLONE_FILES), and nothing the wall's filter lets the
		// entry call says which share one.
		dir := "/proc/" + name + "/task"
		tids, err := dirNames(dir)
		if err == nil {
			for _, tid := range tids {
				if err = tableSockets(dir+"/"+tid+"/fd", held); err != nil && !gone(err) {
					break
				}
				err = nil
			}
		}
		switch {
		case err == nil, gone(err):
		case errors.Is(err, unix.EACCES) && helper(name):
		default:
			return nil, fmt.Errorf("process %s: %w", name, err)
		}
	}
	return held, nil
}

// helpers are the names the launcher gives the processes it forks.
var helpers = []string{"toybox-connect", "toybox-spawner", "toybox-relay"}

// helper reports whether process pid (a /proc name) is one of the entry's
// helpers, by its name.
func helper(pid string) bool {
	var buf [32]byte
	n, err := quiet.ReadSmallFile("/proc/"+pid+"/comm", buf[:])
	return err == nil && slices.Contains(helpers, strings.TrimSpace(string(buf[:n])))
}

// gone reports whether err says the process or thread has ended.
func gone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH)
}

// tableSockets adds the inode of each socket in the descriptor table dir
// (a /proc fd folder) to held.
func tableSockets(dir string, held map[uint64]struct{}) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return err
	}
	d := int(f.Fd())
	var buf [64]byte
	for _, name := range names {
		n, err := unix.Readlinkat(d, name, buf[:])
		if err != nil {
			continue // closed while read
		}
		if ino, ok := strings.CutPrefix(string(buf[:n]), "socket:["); ok {
			if v, err := strconv.ParseUint(strings.TrimSuffix(ino, "]"), 10, 64); err == nil {
				held[v] = struct{}{}
			}
		}
	}
	return nil
}

// dirNames lists the folder dir.
func dirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}
