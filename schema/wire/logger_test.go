package wire

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestLoggerWarnsOfBrokenRules: a connection ended because the peer broke
// the wire's rules or went past its Limits is a warning; a peer that hangs
// up is not.
func TestLoggerWarnsOfBrokenRules(t *testing.T) {
	for _, err := range []error{ErrFDsRefused, ErrTooManyFDs, ErrUnfinished, ErrExports, ErrCaps, ErrCallBytes, ErrAnswerBytes, ErrProtocol, ErrUnserved} {
		var logs syncBuffer
		Logger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))).Error("reader: " + fmt.Errorf("%w: 2 (limit 1)", err).Error())
		if !strings.Contains(logs.String(), "level=WARN") {
			t.Errorf("%q: logged %q; want a warning", err, logs.String())
		}
	}
	var logs syncBuffer
	Logger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))).Error("reader: EOF")
	if logs.String() != "" {
		t.Errorf("a hang-up logged %q; want nothing at warning level", logs.String())
	}
}
