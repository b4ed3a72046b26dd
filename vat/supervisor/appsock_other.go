//go:build !linux

package supervisor

import (
	"context"
	"net"
)

func dialApp(context.Context, string) (net.Conn, error) { return nil, ErrUnsupported }
