//go:build !linux

package cgroup

import "time"

// Config says where a Host makes its walls' groups; there are none here.
type Config struct {
	Name            string
	MountInfo, Self string
	Pid             int
	Version         int
}

// Host makes no group here.
type Host struct{}

// Open returns a Host that enforces nothing.
func Open(Config) *Host { return &Host{} }

// Enabled reports false: no group is made here.
func (h *Host) Enabled() bool { return false }

// Support says nothing is enforced here.
func (h *Host) Support() Support { return Support{Missing: allMissing(ErrUnsupported.Error())} }

func allMissing(why string) map[string]string {
	m := map[string]string{}
	for _, k := range Kinds {
		m[k] = why
	}
	return m
}

// New returns ErrUnsupported.
func (h *Host) New(string, Limits) (*Group, error) { return nil, ErrUnsupported }

// Sweep does nothing here.
func (h *Host) Sweep() (int, error) { return 0, nil }

// Close does nothing here.
func (h *Host) Close() {}

// Group is never made here.
type Group struct{}

// Limits returns none.
func (g *Group) Limits() Limits { return Limits{} }

// Add returns ErrUnsupported.
func (g *Group) Add(int) error { return ErrUnsupported }

// OOMKills returns 0.
func (g *Group) OOMKills() int { return 0 }

// CPUTime returns ErrUnsupported.
func (g *Group) CPUTime() (time.Duration, error) { return 0, ErrUnsupported }

// Dirs returns none.
func (g *Group) Dirs() []string { return nil }

// Remove does nothing.
func (g *Group) Remove() error { return nil }
