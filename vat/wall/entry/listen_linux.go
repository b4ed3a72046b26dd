package entry

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"toybox/vat/relay"
)

// portRelay is the entry's end of the launcher's relay (te_relay): a
// SOCK_SEQPACKET socket on which each answer is {errno, 0} and, when errno
// is 0, one descriptor.
type portRelay struct {
	port int
	mu   sync.Mutex // one request at a time: answers come in order
	c    *net.UnixConn
}

// answer reads one answer of the relay: the descriptor it carries, or why
// there is none.
func (r *portRelay) answer() (*os.File, error) {
	var b [8]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := r.c.ReadMsgUnix(b[:], oob)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, errors.New("the relay ended")
	}
	if n != len(b) {
		return nil, fmt.Errorf("the relay answered %d bytes", n)
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			got, err := unix.ParseUnixRights(&m)
			if err == nil {
				fds = append(fds, got...)
			}
		}
	}
	if errno := unix.Errno(binary.NativeEndian.Uint32(b[:4])); errno != 0 {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
		return nil, errno
	}
	if len(fds) != 1 {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
		return nil, fmt.Errorf("the relay answered %d descriptors", len(fds))
	}
	return os.NewFile(uintptr(fds[0]), "listen-relay-answer"), nil
}

// dial asks the relay for a connection to the app's port.
func (r *portRelay) dial() (net.Conn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.c.Write([]byte{1}); err != nil {
		return nil, err
	}
	f, err := r.answer()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return net.FileConn(f)
}

// serveListen waits until the relay has made $TOYBOX_LISTEN (the app's
// port accepts), then relays each connection accepted there to the port
// until ctx ends. It returns once the socket is served, or why it could
// not be made. It owns cfg.Relay.
func serveListen(ctx context.Context, cfg *Listen, logger *slog.Logger) error {
	c, err := net.FileConn(cfg.Relay)
	_ = cfg.Relay.Close()
	if err != nil {
		return fmt.Errorf("using the relay's socket: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		_ = c.Close()
		return errors.New("the relay's socket is not a unix socket")
	}
	r := &portRelay{port: cfg.Port, c: uc}
	stop := context.AfterFunc(ctx, func() { _ = uc.Close() })
	f, err := r.answer()
	if err != nil {
		stop()
		_ = uc.Close()
		return fmt.Errorf("making $TOYBOX_LISTEN once the app's port %d accepted: %w", cfg.Port, err)
	}
	l, err := netListener(f)
	if err != nil {
		stop()
		_ = uc.Close()
		return fmt.Errorf("serving $TOYBOX_LISTEN: %w", err)
	}
	context.AfterFunc(ctx, func() { _ = l.Close() })
	var said rateLog
	go func() {
		_ = acceptLoop(ctx, l, logger, func(in net.Conn) {
			go func() {
				defer in.Close()
				out, err := r.dial()
				if err != nil {
					if n, ok := said.allow(time.Now()); ok {
						logger.Warn("connecting to the app's port failed", keyPort, cfg.Port, keyReason, err.Error(), "unlogged", n)
					}
					return
				}
				defer out.Close()
				_, _, _ = relay.Pair(in, out)
			}()
		})
	}()
	return nil
}
