//go:build !linux

package supervisor

import (
	"context"
	"os"

	"toybox/labels"
	"toybox/vat/grant"
	"toybox/vat/store"
)

func (s *Supervisor) spawnWalled(context.Context, *vat, store.Code, store.Record, []labels.Set, *grant.Vat, Limits) (Process, *os.File, <-chan struct{}, error) {
	return nil, nil, nil, ErrUnsupported
}

func (s *Supervisor) spawnUnwalled(*vat, store.Code, store.Record, *grant.Vat) (Process, error) {
	return nil, ErrUnsupported
}

func (s *Supervisor) capPair(context.Context, *grant.Vat, string, bool) (*os.File, <-chan struct{}, error) {
	return nil, nil, ErrUnsupported
}
