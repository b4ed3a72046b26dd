package notices

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"toybox/tests/testenv"
	"toybox/vat/switches"
	"toybox/vat/words"
)

// fileSink is a real Command sink: sh appends each notice's JSON to a
// file, or fails while the file "fail" exists.
func fileSink(t *testing.T) (Command, func() []Notice, func(bool)) {
	t.Helper()
	dir := t.TempDir()
	out, fail := filepath.Join(dir, "notices"), filepath.Join(dir, "fail")
	sink := Command{Path: "/bin/sh", Args: []string{"-c", `[ -e "$1" ] && { echo "the pager is down" >&2; exit 1; }; cat >> "$0"; echo >> "$0"`, out, fail}}
	read := func() []Notice {
		b, _ := os.ReadFile(out)
		var ns []Notice
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if line == "" {
				continue
			}
			var n Notice
			if err := json.Unmarshal([]byte(line), &n); err != nil {
				t.Fatalf("the sink got %q: %v", line, err)
			}
			ns = append(ns, n)
		}
		return ns
	}
	setFail := func(on bool) {
		if on {
			_ = os.WriteFile(fail, nil, 0o600)
		} else {
			_ = os.Remove(fail)
		}
	}
	return sink, read, setFail
}

func kinds(ns []Notice) []Kind {
	var out []Kind
	for _, n := range ns {
		out = append(out, n.Kind)
	}
	return out
}

func sameKinds(a []Kind, b ...Kind) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

var bootVats = []Vat{
	{ID: "alice", Word: words.Walled, Reach: Text{"HTTPS to api.example.com", "HTTPS a api.example.com"}},
	{ID: "bob", Word: words.NotWalledChoice},
}

func TestBootWallsOn(t *testing.T) {
	dir := t.TempDir()
	sw, err := switches.New(switches.Config{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	sink, read, setFail := fileSink(t)
	ctx := context.Background()

	// First boot, the sink down: the per-boot notice and the once-only
	// one both fail; the marker is not set.
	setFail(true)
	c := New(Config{Switches: sw, Sink: sink})
	c.Boot(ctx, bootVats)
	if got := kinds(c.List()); !sameKinds(got, SomeNotWalled, NowWalled) {
		t.Fatalf("first boot kept %v; want some-not-walled, now-walled", got)
	}
	for _, n := range c.List() {
		if n.Delivered || !strings.Contains(n.Error, "the pager is down") {
			t.Errorf("%s: delivered %v, error %q; want not delivered, with the sink's words", n.Kind, n.Delivered, n.Error)
		}
	}
	if ok, _ := sw.Marked(markerNowWalled); ok {
		t.Fatal("the marker was set though the notice did not go out")
	}

	// Next boot, the sink up: both go out, the marker is set.
	setFail(false)
	c = New(Config{Switches: sw, Sink: sink})
	c.Boot(ctx, bootVats)
	got := read()
	if !sameKinds(kinds(got), SomeNotWalled, NowWalled) {
		t.Fatalf("second boot sent %v; want some-not-walled, now-walled", kinds(got))
	}
	if l := got[0].Lines; len(l) != 1 || l[0].EN != "bob: not walled (your choice)" || l[0].ES != "bob: sin muro (por tu elección)" {
		t.Errorf("some-not-walled lines = %+v; want bob's word in both languages", l)
	}
	if l := got[1].Lines; len(l) != 2 || !strings.Contains(l[0].EN, "HTTPS to api.example.com") || got[1].Title.EN != words.NoticeNowWalled.In("en") {
		t.Errorf("now-walled = %+v; want a line per vat saying what it reaches", got[1])
	}
	if ok, _ := sw.Marked(markerNowWalled); !ok {
		t.Fatal("the marker was not set once the notice went out")
	}

	// Third boot: only the per-boot notice.
	c = New(Config{Switches: sw, Sink: sink})
	c.Boot(ctx, bootVats)
	if got := kinds(read()); !sameKinds(got, SomeNotWalled, NowWalled, SomeNotWalled) {
		t.Fatalf("third boot: the sink has %v; want one more some-not-walled only", got)
	}
	// Every vat walled: no notice at all.
	c = New(Config{Switches: sw, Sink: sink})
	c.Boot(ctx, bootVats[:1])
	if n := len(c.List()); n != 0 {
		t.Fatalf("every vat walled, marker set: %d notices; want none", n)
	}
}

func TestBootKillSwitch(t *testing.T) {
	dir := t.TempDir()
	sw, err := switches.New(switches.Config{Kill: "off", StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	sink, read, _ := fileSink(t)
	vats := []Vat{{ID: "alice", Word: words.NotWalledOperator}}
	New(Config{Switches: sw, Sink: sink}).Boot(context.Background(), vats)
	New(Config{Switches: sw, Sink: sink}).Boot(context.Background(), vats)
	got := read()
	if !sameKinds(kinds(got), KillSwitch, SomeNotWalled) {
		t.Fatalf("two boots with the kill switch sent %v; want kill-switch once, then some-not-walled", kinds(got))
	}
	last := got[1].Lines[len(got[1].Lines)-1]
	if last.EN != words.NoticeKillSwitchLine.In("en") {
		t.Errorf("the per-boot notice ends %q; want the kill switch's line", last.EN)
	}
}

func TestBootHostOffSendsNothing(t *testing.T) {
	sw, err := switches.New(switches.Config{Default: "off", StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	sink, read, _ := fileSink(t)
	c := New(Config{Switches: sw, Sink: sink})
	c.Boot(context.Background(), []Vat{{ID: "alice", Word: words.NotWalledHost}})
	if len(read()) != 0 || len(c.List()) != 0 {
		t.Fatal("walls off for this computer and no kill switch: a notice was sent")
	}
}

func TestWatchTellsAnOutsideChange(t *testing.T) {
	dir := t.TempDir()
	sw, err := switches.New(switches.Config{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	sink, read, _ := fileSink(t)
	c := New(Config{Switches: sw, Sink: sink, Poll: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); c.Watch(ctx) }()
	defer func() { cancel(); wg.Wait() }()
	time.Sleep(100 * time.Millisecond)
	if err := sw.SetChoice("alice", false); err != nil { // toybox's own write
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(read()); n != 0 {
		t.Fatalf("toybox's own write was told as a change from outside (%d notices)", n)
	}
	if err := os.WriteFile(filepath.Join(dir, switches.FileName), []byte(`{"unwalled":["mallory"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, func() error {
		if got := read(); len(got) == 0 {
			return fmt.Errorf("after an outside edit the sink has %+v; want one changed-outside notice", got)
		}
		return nil
	})
	got := read()
	if !sameKinds(kinds(got), ChangedOutside) || !strings.Contains(got[0].Lines[0].EN, "next time each vat starts") {
		t.Fatalf("after an outside edit the sink has %+v; want one changed-outside notice", got)
	}
}

func TestWebhook(t *testing.T) {
	for _, bad := range []string{"https://127.0.0.1/x", "http://10.0.0.5/x", "http://example.com/x", "http://u:p@127.0.0.1/x"} {
		if _, err := NewWebhook(bad); err == nil {
			t.Errorf("NewWebhook(%q) accepted; want refused", bad)
		}
	}
	var got []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
	}))
	defer srv.Close()
	w, err := NewWebhook(srv.URL + "/hook")
	if err != nil {
		t.Fatal(err)
	}
	sw, _ := switches.New(switches.Config{Kill: "off", StateDir: t.TempDir()})
	New(Config{Switches: sw, Sink: w}).Boot(context.Background(), nil)
	var n Notice
	if err := json.Unmarshal(got, &n); err != nil || n.Kind != KillSwitch {
		t.Fatalf("the webhook got %q (%v); want the kill-switch notice", got, err)
	}
}

// TestBootNamesApprovedAndShares: an approved command and a vat that
// shares a host resource are not walled, and the per-boot notice says
// each one's word, the share's name included.
func TestBootNamesApprovedAndShares(t *testing.T) {
	sw, err := switches.New(switches.Config{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c := New(Config{Switches: sw})
	c.Boot(context.Background(), []Vat{
		{ID: "alice", Word: words.Walled},
		{ID: "pg", Word: words.NotWalledApproved},
		{ID: "media", Word: words.NotWalledShares, Detail: "Crow's database"},
	})
	got := c.List()
	if len(got) == 0 || got[0].Kind != SomeNotWalled {
		t.Fatalf("notices %+v; want some-not-walled first", got)
	}
	want := []Text{
		{"pg: not walled (approved commands)", "pg: sin muro (órdenes aprobadas)"},
		{"media: not walled: shares Crow's database", "media: sin muro: comparte Crow's database"},
	}
	if l := got[0].Lines; len(l) != len(want) || l[0] != want[0] || l[1] != want[1] {
		t.Errorf("some-not-walled lines = %+v; want %+v", l, want)
	}
}
