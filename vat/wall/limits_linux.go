package wall

import (
	"toybox/vat/wall/cgroup"
)

// groupMaking is a wall's cgroup being made while bubblewrap sets the
// sandbox up: off the spawn's path (a group costs about half a
// millisecond on cgroup v1, where it is four), wanted only at the door.
type groupMaking struct {
	done chan struct{}
	g    *cgroup.Group
	err  error
}

// makeGroup starts making vat id's group in h with l; nil when h makes
// none (the wall then has no cgroup of its own).
func makeGroup(h *cgroup.Host, id string, l cgroup.Limits) *groupMaking {
	if !h.Enabled() {
		return nil
	}
	m := &groupMaking{done: make(chan struct{})}
	go func() {
		defer close(m.done)
		m.g, m.err = h.New(id, l)
	}()
	return m
}

// wait returns the group once it is made (nil, nil for none).
func (m *groupMaking) wait() (*cgroup.Group, error) {
	if m == nil {
		return nil, nil
	}
	<-m.done
	return m.g, m.err
}

// remove removes the group, once made (a start that failed).
func (m *groupMaking) remove() {
	if g, _ := m.wait(); g != nil {
		_ = g.Remove()
	}
}

// group returns the wall's cgroup, nil when it has none.
func (p *Process) group() *cgroup.Group {
	g, _ := p.grp.wait()
	return g
}

// Limits returns the limits the wall's cgroup holds it to: only those
// the host enforces (zero fields: none).
func (p *Process) Limits() cgroup.Limits {
	if g := p.group(); g != nil {
		return g.Limits()
	}
	return cgroup.Limits{}
}
