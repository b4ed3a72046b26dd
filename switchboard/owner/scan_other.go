//go:build !linux

package owner

const supported = false

func readListeners() ([]Listener, error, error) { return nil, nil, ErrUnsupported }

func scanHolders(map[uint64]bool) (map[uint64][]Proc, map[int]int, error) {
	return nil, nil, ErrUnsupported
}
