package wire

import (
	"context"
	"log/slog"
	"strings"

	"capnproto.org/go/capnp/v3/rpc"
)

// Logger adapts slog to go-capnp's rpc.Logger for a Conn's RPC. go-capnp
// logs a peer that hangs up (a vat that exits, a switchboard that
// restarts) as an error; that is an ordinary event, so its lines go out at
// debug level. A connection that ends because the peer broke this wire's
// rules (descriptors where none are accepted, too many left unclaimed,
// past its Limits) is a warning: the only trace of a peer misbehaving.
func Logger(l *slog.Logger) rpc.Logger { return rpcLogger{l} }

type rpcLogger struct{ l *slog.Logger }

func (r rpcLogger) Debug(msg string, args ...any) { r.l.Debug(msg, args...) }
func (r rpcLogger) Info(msg string, args ...any)  { r.l.Debug(msg, args...) }
func (r rpcLogger) Warn(msg string, args ...any)  { r.l.Debug(msg, args...) }

func (r rpcLogger) Error(msg string, args ...any) {
	level := slog.LevelDebug
	// go-capnp writes the transport's error into the message text.
	for _, rule := range []error{ErrFDsRefused, ErrTooManyFDs, ErrUnfinished, ErrExports, ErrCaps, ErrCallBytes, ErrAnswerBytes, ErrProtocol, ErrUnserved} {
		if strings.Contains(msg, rule.Error()) {
			level = slog.LevelWarn
		}
	}
	r.l.Log(context.Background(), level, "capnp: "+msg, args...)
}
