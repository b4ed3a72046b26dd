package wall

import (
	"slices"
	"sync"
	"time"
)

// Host is the state the walls of one supervisor share.
// The supervisor makes one with NewHost and hands it to every Spec.
// A Host is safe for concurrent use.
//
// It caches what every spawn would otherwise look up again:
//   - the system folders this host has, for etcRecheck (one second);
//   - the allowlisted /etc entries this host has, for etcRecheck;
//   - the folder name of the last /etc view asked for, until other entries are;
//   - bubblewrap's path on $PATH, until a start cannot run it;
//   - which state dirs have their /dev folder made, for the Host's life.
//
// It also keeps the record of the /etc views it builds:
//   - what each view was built from, checked again after etcRecheck;
//   - which running walls bind which view.
//
// A view set aside by a rebuild is removed only once no running wall binds it.
// Only the Host that started those walls knows that.
// So one supervisor holds one Host for its whole life.
type Host struct {
	system struct {
		sync.Mutex
		at  time.Time
		ops []Op
	}
	etcPresent struct {
		sync.Mutex
		at      time.Time
		entries []EtcEntry
	}
	etcViewLast struct {
		sync.Mutex
		state   string
		entries []EtcEntry
		dir     string
	}
	bwrapPath struct {
		sync.Mutex
		path string // found on $PATH; "" until looked up
	}
	devDirs struct {
		sync.Mutex
		m map[string]bool // state dir → its dev folder is ready
	}
	etcViews struct {
		sync.Mutex
		m map[string]*etcView // view folder → what its last build saw
	}
	views viewUse

	// noDevDir makes every wall use the tmpfs /dev (tests of that path).
	noDevDir bool
}

// NewHost returns a Host with nothing cached.
func NewHost() *Host {
	h := &Host{}
	h.devDirs.m = map[string]bool{}
	h.etcViews.m = map[string]*etcView{}
	h.views.walls = map[fileID]int{}
	h.views.aside = map[fileID]string{}
	return h
}

// A wall's /etc is a bind of the view folder its start opened (by fd), so
// removing the entries of a view empties the /etc of every wall that binds
// it. A view set aside by a rebuild is therefore removed only once no
// running wall binds it: at once when none does, else when the last of
// them ends. One left behind by a crash goes at the next start
// (SweepViews).
type viewUse struct {
	sync.Mutex
	walls map[fileID]int    // running walls that bind the view, by its identity
	aside map[fileID]string // views set aside while bound, and where they are
}

// etcView is what the last build of one view saw.
type etcView struct {
	mu      sync.Mutex
	fp      string    // fingerprint of the sources when built
	files   []string  // regular files and folders inside copied folders (their changes count)
	checked time.Time // when fp was last found current
}

// systemOps binds the system folders this host has, read-only at their
// own paths, and makes those that are links (a merged /usr's /bin, /lib)
// the same links. They are looked up at most once per etcRecheck, as
// /etc's entries are.
func (h *Host) systemOps() []Op {
	h.system.Lock()
	defer h.system.Unlock()
	if h.system.ops == nil || time.Since(h.system.at) >= etcRecheck {
		h.system.ops, h.system.at = lookSystemOps(), time.Now()
	}
	return slices.Clone(h.system.ops)
}
