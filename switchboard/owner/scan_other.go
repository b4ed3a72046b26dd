//go:build !linux

package owner

const supported = false

func readListeners() ([]Listener, error) { return nil, ErrUnsupported }

func scanHolders(map[uint64]bool) (map[uint64][]Proc, map[int]int, error) {
	return nil, nil, ErrUnsupported
}
