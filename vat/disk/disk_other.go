//go:build !linux

package disk

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

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

// MountScratch returns the reason there are no disk limits here.
func (d *Disks) MountScratch(string, string, int64) (int64, error) { return 0, d.Support() }

// RemoveScratch removes the image img.
func (d *Disks) RemoveScratch(img, _ string) error {
	if err := os.Remove(img); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Full reports false: nothing is bounded here.
func Full(string) bool { return false }

// Image is where vat id's image would lie: nowhere here.
func (d *Disks) Image(string) string { return "" }

// Close does nothing here.
func (d *Disks) Close() error { return nil }

// Size returns 0.
func (d *Disks) Size(string) int64 { return 0 }
