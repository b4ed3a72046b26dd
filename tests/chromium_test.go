//go:build linux

package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"toybox/tests/testenv"
)

// browser is a real headless Chromium, driven over the DevTools protocol
// on a pipe (--remote-debugging-pipe: it reads commands on its fd 3 and
// writes answers and events on its fd 4, each a JSON text ended by NUL),
// with one tab attached. Each browser has a fresh profile of its own.
type browser struct {
	t       testing.TB
	cmd     *exec.Cmd
	in      io.WriteCloser
	session string

	mu      sync.Mutex
	next    int
	waiting map[int]chan cdpMessage
	events  chan cdpMessage
	log     *syncBuffer
}

type cdpMessage struct {
	ID        int             `json:"id,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// startBrowser starts Chromium and opens one tab.
func startBrowser(t testing.TB) *browser {
	t.Helper()
	path := testenv.RequireChromium(t)
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, in: cmdW, waiting: map[int]chan cdpMessage{}, events: make(chan cdpMessage, 256), log: &syncBuffer{}}
	// The flags: headless, no sandbox of its own (it runs as root here),
	// and nothing that reaches out to the network by itself.
	b.cmd = exec.Command(path, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+t.TempDir(), "--remote-debugging-pipe", "about:blank")
	b.cmd.ExtraFiles = []*os.File{cmdR, outW}
	b.cmd.Stdout, b.cmd.Stderr = b.log, b.log
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = cmdR.Close()
	_ = outW.Close()
	t.Cleanup(func() {
		_ = b.in.Close() // Chromium exits when its pipe closes
		done := make(chan struct{})
		go func() { _ = b.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = b.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("chromium's output:\n%s", tail(b.log))
		}
	})
	go b.read(outR)
	var target struct {
		TargetID string `json:"targetId"`
	}
	b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached)
	b.session = attached.SessionID
	b.call(b.session, "Page.enable", nil, nil)
	return b
}

func (b *browser) read(r io.ReadCloser) {
	defer r.Close()
	br := bufio.NewReader(r)
	for {
		raw, err := br.ReadBytes(0)
		if err != nil {
			b.mu.Lock()
			for id, ch := range b.waiting {
				close(ch)
				delete(b.waiting, id)
			}
			b.mu.Unlock()
			return
		}
		var m cdpMessage
		if json.Unmarshal(raw[:len(raw)-1], &m) != nil {
			continue
		}
		if m.ID == 0 {
			select {
			case b.events <- m:
			default: // nobody waits for it
			}
			continue
		}
		b.mu.Lock()
		ch := b.waiting[m.ID]
		delete(b.waiting, m.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
}

// call sends one command (to the tab's session, or to the browser when
// session is "") and decodes its result into out (if not nil).
func (b *browser) call(session, method string, params, out any) {
	b.t.Helper()
	b.mu.Lock()
	b.next++
	id := b.next
	ch := make(chan cdpMessage, 1)
	b.waiting[id] = ch
	b.mu.Unlock()
	msg, err := json.Marshal(map[string]any{"id": id, "sessionId": session, "method": method, "params": params})
	if session == "" {
		msg, err = json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	}
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := b.in.Write(append(msg, 0)); err != nil {
		b.t.Fatalf("chromium %s: %v", method, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			b.t.Fatalf("chromium %s: it ended", method)
		}
		if m.Error != nil {
			b.t.Fatalf("chromium %s: %s", method, m.Error.Message)
		}
		if out != nil {
			if err := json.Unmarshal(m.Result, out); err != nil {
				b.t.Fatalf("chromium %s: %v in %s", method, err, m.Result)
			}
		}
	case <-time.After(60 * time.Second):
		b.t.Fatalf("chromium %s: no answer in 60s", method)
	}
}

// open navigates the tab to url and waits for its load event.
func (b *browser) open(url string) {
	b.t.Helper()
	for len(b.events) > 0 {
		<-b.events
	}
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	b.call(b.session, "Page.navigate", map[string]any{"url": url}, &nav)
	if nav.ErrorText != "" {
		b.t.Fatalf("chromium could not open %s: %s", url, nav.ErrorText)
	}
	deadline := time.After(60 * time.Second)
	for {
		select {
		case m := <-b.events:
			if m.Method == "Page.loadEventFired" && m.SessionID == b.session {
				return
			}
		case <-deadline:
			b.t.Fatalf("chromium: %s did not load in 60s", url)
		}
	}
}

// eval evaluates expr in the tab, awaiting it if it is a promise, and
// returns its value as a string.
func (b *browser) eval(expr string) string {
	b.t.Helper()
	var res struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	b.call(b.session, "Runtime.evaluate", map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true}, &res)
	if res.ExceptionDetails != nil {
		b.t.Fatalf("chromium: %s threw: %s", expr, res.ExceptionDetails.Text)
	}
	return fmt.Sprint(res.Result.Value)
}
