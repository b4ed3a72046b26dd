//go:build !linux

package switchboard

import "net"

type tracker struct{}

func newTracker() (*tracker, error)  { return nil, ErrUnsupported }
func (t *tracker) add(x *held) error { return ErrUnsupported }
func (t *tracker) remove(x *held)    {}
func (t *tracker) close() error      { return nil }
func shutdownConn(c net.Conn)        { _ = c.Close() }

func (t *tracker) count() int { return 0 }
