//go:build !linux

package wall

// OpenEntry returns ErrUnsupported: walls need Linux.
func OpenEntry(string) (*Entry, error) { return nil, ErrUnsupported }
