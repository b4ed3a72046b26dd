package bridge

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"toybox/tests/testenv"
	"toybox/vat/mcp/mcptest"
)

// TestSharedRestart: a shared process that exits on its own is started
// again after a wait that doubles with each exit in a row, and its
// sessions go on (R26): the call in flight gets -32603 naming the exit,
// the next calls reach the new process under the same session id. At the
// crash loop's bound the sessions end (404).
func TestSharedRestart(t *testing.T) {
	logs := &testenv.Buffer{}
	_, srv := newBridge(t, Config{
		Mode: ModeShared, Restart: 50 * time.Millisecond, MaxRestart: time.Second,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	})
	ctx := context.Background()
	c := client(srv, "alice")
	if err := c.Initialize(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	before := pid(t, c)
	for i := 1; i < CrashLoop; i++ {
		r, err := c.Post(ctx, mcptest.Tool(2, "crash", nil))
		if err != nil || !strings.Contains(string(r.Final()["error"]), "exit status 3") {
			t.Fatalf("crash %d: %v %s; want -32603 naming the exit", i, err, r.Body)
		}
		var after string
		err = mcptest.Eventually(5*time.Second, func() error {
			r, err := c.Post(ctx, mcptest.Tool(9, "pid", nil))
			if err != nil {
				return err
			}
			if r.Status == http.StatusNotFound {
				t.Fatalf("after crash %d the session ended (404); want it kept", i)
			}
			if after = r.Text(); r.Final()["error"] != nil || after == "" || after == before {
				return fmt.Errorf("pid %q (%s)", after, r.Body)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("after crash %d: no new process: %v", i, err)
		}
		if r, err := c.Post(ctx, mcptest.Tool(3, "count", nil)); err != nil || r.Text() != "1" {
			t.Errorf("after crash %d: count %v %q; want a fresh process's 1", i, err, r.Text())
		}
		before = after
	}
	for _, want := range []string{"in 50ms", "in 100ms", "in 200ms", "in 400ms"} {
		if !strings.Contains(logs.String(), "toybox starts it again "+want) {
			t.Errorf("no restart %s in the log:\n%s", want, logs.String())
		}
	}
	// The fifth exit in the window is a crash loop: the session ends.
	if _, err := c.Post(ctx, mcptest.Tool(4, "crash", nil)); err != nil {
		t.Fatal(err)
	}
	err := mcptest.Eventually(5*time.Second, func() error {
		r, err := c.Post(ctx, mcptest.Tool(5, "pid", nil))
		if err != nil || r.Status != http.StatusNotFound {
			return fmt.Errorf("%w %+v; want 404", err, r)
		}
		return nil
	})
	if err != nil {
		t.Errorf("a crash loop: %v", err)
	}
}
