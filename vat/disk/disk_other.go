//go:build !linux

package disk

import "fmt"

// Disks limits nothing here.
type Disks struct{}

// Open returns Disks that limit nothing.
func Open(string) *Disks { return &Disks{} }

// Support says data folders cannot be limited here.
func (d *Disks) Support() error { return fmt.Errorf("%w: only on linux", ErrUnsupported) }

// Mount returns the reason there are no disk limits here.
func (d *Disks) Mount(string, string, int64) (int64, error) { return 0, d.Support() }

// MountRun returns the reason there are no disk limits here.
func (d *Disks) MountRun(string, int, int) error { return d.Support() }

// UnmountRun does nothing here.
func (d *Disks) UnmountRun(string) error { return nil }

// Unmount does nothing here.
func (d *Disks) Unmount(string) error { return nil }

// Remove does nothing here.
func (d *Disks) Remove(string, string) error { return nil }

// Close does nothing here.
func (d *Disks) Close() error { return nil }

// Size returns 0.
func (d *Disks) Size(string) int64 { return 0 }
