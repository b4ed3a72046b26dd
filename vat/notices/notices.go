// Package notices tells the operator what the walls design says they must
// hear.
//
// It tells, per boot, the vats that run without their walls; once per computer, that
// walls now run here (or, with the kill switch set, that they do not); and a
// change of walls.json that toybox did not write. Each notice is logged,
// kept for the status page, and delivered to the operator's sink (a command
// or a webhook on loopback).
package notices

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"toybox/vat/switches"
	"toybox/vat/words"
)

// Kind is which notice it is.
type Kind string

// The notices.
const (
	// SomeNotWalled: per boot, when the kill switch is set or when walls
	// are on and some vat runs without its wall.
	SomeNotWalled Kind = "some-not-walled"
	// NowWalled: once per computer, on the first boot that really runs a
	// vat inside its wall.
	NowWalled Kind = "now-walled"
	// KillSwitch: once per computer, instead of SomeNotWalled, on the
	// first boot with the kill switch set.
	KillSwitch Kind = "kill-switch"
	// ChangedOutside: walls.json was changed by something other than
	// toybox.
	ChangedOutside Kind = "changed-outside"
)

// Title is the notice's title.
func (k Kind) Title() words.Phrase {
	switch k {
	case SomeNotWalled:
		return words.NoticeSomeNotWalled
	case NowWalled:
		return words.NoticeNowWalled
	case KillSwitch:
		return words.NoticeKillSwitch
	}
	return words.NoticeChangedOutside
}

// The markers in walls.json of the notices sent once per computer.
const (
	markerNowWalled  = "now-walled"
	markerKillSwitch = "kill-switch"
)

// Text is one text in both languages.
type Text struct {
	EN string `json:"en"`
	ES string `json:"es"`
}

// In returns the text in lang.
func (t Text) In(lang string) string {
	if lang == "es" {
		return t.ES
	}
	return t.EN
}

// Notice is one notice.
type Notice struct {
	Kind  Kind      `json:"kind"`
	At    time.Time `json:"at"`
	Title Text      `json:"title"`
	// Lines are one per vat ("alice: not walled (your choice)"), then
	// any closing line.
	Lines []Text `json:"lines"`
	// Delivered says the sink took it; Error says why not.
	Delivered bool   `json:"delivered"`
	Error     string `json:"error,omitempty"`
}

// Vat is what the boot notices say of one vat.
type Vat struct {
	ID   string
	Word words.Word
	// Detail is what its word names ("not walled: shares <Detail>"), if
	// anything; DetailES is it in Spanish, if it differs.
	Detail, DetailES string
	// Reach is what it can reach, in plain words (package reach).
	Reach Text
}

// Config configures a Center.
type Config struct {
	// Switches are read for the kill switch and the per-host default,
	// and hold the once-per-computer markers. Required.
	Switches *switches.Switches
	// Sink delivers each notice. If nil, a notice goes to the log and
	// the status page only, and counts as delivered.
	Sink Sink
	// Logger receives each notice. If nil, discarded.
	Logger *slog.Logger
	// Poll is how often walls.json is looked at. If zero, 2s.
	Poll time.Duration
	// Now returns the time. If nil, time.Now.
	Now func() time.Time
}

// MaxKept is how many notices the status page shows: the latest.
const MaxKept = 50

// Center sends and keeps this boot's notices. Safe for concurrent use.
type Center struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex
	kept []Notice
}

// New returns a Center.
func New(cfg Config) *Center {
	if cfg.Poll == 0 {
		cfg.Poll = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Center{cfg: cfg, log: log}
}

// List returns the notices kept, oldest first.
func (c *Center) List() []Notice {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Notice(nil), c.kept...)
}

// post logs n, delivers it and keeps it. It reports whether it was
// delivered.
func (c *Center) post(ctx context.Context, kind Kind, lines []Text) bool {
	t := kind.Title()
	n := Notice{Kind: kind, At: c.cfg.Now().UTC(), Title: Text{t.In("en"), t.In("es")}, Lines: lines}
	en := make([]string, 0, len(lines))
	for _, l := range lines {
		en = append(en, l.EN)
	}
	var err error
	if c.cfg.Sink != nil {
		err = c.cfg.Sink.Deliver(ctx, n)
	}
	n.Delivered = err == nil
	if err != nil {
		n.Error = err.Error()
	}
	if n.Delivered {
		c.log.Warn("notice", "kind", string(kind), "title", n.Title.EN, "lines", en)
	} else {
		c.log.Error("notice not delivered", "kind", string(kind), "title", n.Title.EN, "lines", en, "error", n.Error)
	}
	c.mu.Lock()
	c.kept = append(c.kept, n)
	if len(c.kept) > MaxKept {
		c.kept = c.kept[len(c.kept)-MaxKept:]
	}
	c.mu.Unlock()
	return n.Delivered
}

func phrase(p words.Phrase) Text { return Text{p.In("en"), p.In("es")} }

func wordLine(v Vat) Text {
	return Text{v.ID + ": " + v.Word.With("en", v.Detail), v.ID + ": " + v.Word.With("es", cmp.Or(v.DetailES, v.Detail))}
}

// walled reports whether w is a vat running inside its wall (one that
// shares a host resource included).
func walled(w words.Word) bool {
	return w == words.Walled || w == words.WalledNoSeccomp || w == words.NotWalledShares
}

func notWalled(w words.Word) bool { return w.NotWalled() }

// Boot sends this boot's notices for vats (their words once they settled):
//
//   - The kill switch set: the first time on this computer, KillSwitch
//     (its marker set only once it went out); after that, SomeNotWalled
//     with a closing line that says the kill switch is set.
//   - Walls off for this computer (the per-host default) and no kill
//     switch: nothing.
//   - Walls on: SomeNotWalled when some vat runs without its wall; and,
//     the first time a vat really runs walled here, NowWalled with what
//     each vat can reach (its marker set only once it went out, so a
//     failed delivery is tried again at the next boot).
func (c *Center) Boot(ctx context.Context, vats []Vat) {
	sw := c.cfg.Switches
	if sw.Kill() {
		c.once(ctx, markerKillSwitch, func() bool {
			lines := []Text{phrase(words.NoticeKillSwitchFirstLine)}
			for _, v := range vats {
				lines = append(lines, wordLine(v))
			}
			return c.post(ctx, KillSwitch, lines)
		}, func() {
			var lines []Text
			for _, v := range vats {
				lines = append(lines, wordLine(v))
			}
			c.post(ctx, SomeNotWalled, append(lines, phrase(words.NoticeKillSwitchLine)))
		})
		return
	}
	if sw.HostOff() {
		return
	}
	var lines []Text
	anyWalled := false
	for _, v := range vats {
		if notWalled(v.Word) {
			lines = append(lines, wordLine(v))
		}
		anyWalled = anyWalled || walled(v.Word)
	}
	if len(lines) > 0 {
		c.post(ctx, SomeNotWalled, lines)
	}
	if !anyWalled {
		return
	}
	c.once(ctx, markerNowWalled, func() bool {
		var lines []Text
		for _, v := range vats {
			l := wordLine(v)
			if v.Reach.EN != "" {
				l.EN += "; " + v.Reach.EN
				l.ES += "; " + v.Reach.ES
			}
			lines = append(lines, l)
		}
		return c.post(ctx, NowWalled, lines)
	}, nil)
}

// once sends a once-per-computer notice unless its marker is set, and sets
// the marker once it went out; when the marker is set, it runs otherwise
// (if not nil).
func (c *Center) once(ctx context.Context, marker string, send func() bool, otherwise func()) {
	sw := c.cfg.Switches
	done, err := sw.Marked(marker)
	if err != nil {
		c.log.Error("reading the notice markers in walls.json", "error", err.Error())
		return // sent next boot, rather than twice
	}
	if done {
		if otherwise != nil {
			otherwise()
		}
		return
	}
	if !send() {
		return // not marked: tried again at the next boot
	}
	if err := sw.Mark(marker, c.cfg.Now()); err != nil {
		c.log.Error("setting a notice marker in walls.json", "marker", marker, "error", err.Error())
	}
}

// Watch looks at walls.json every Poll until ctx ends, and sends
// ChangedOutside each time something other than toybox changed it.
func (c *Center) Watch(ctx context.Context) {
	sw := c.cfg.Switches
	if _, err := sw.ChangedOutside(); err != nil { // take note of it as it is
		c.log.Warn("reading walls.json", "error", err.Error())
	}
	t := time.NewTicker(c.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := sw.ChangedOutside()
		if err != nil {
			c.log.Warn("reading walls.json", "error", err.Error())
		}
		if changed {
			c.post(ctx, ChangedOutside, []Text{phrase(words.NoticeChangedOutsideLine)})
		}
	}
}
