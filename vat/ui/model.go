package ui

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"toybox/labels"
	"toybox/vat/activity"
	"toybox/vat/reach"
	"toybox/vat/supervisor"
	"toybox/vat/words"
)

// Page is everything the status page shows: the one struct rendered as
// HTML (GET /ui/) and as JSON (GET /ui/status.json, toybox status --json).
// Each fact of a vat comes from its supervisor.Status in vatView, one line
// each.
type Page struct {
	Lang    string       `json:"lang"`
	At      time.Time    `json:"at"`
	Host    Host         `json:"host"`
	Notices []NoticeView `json:"notices"`
	Vats    []VatView    `json:"vats"`

	// Actions: the Fix-it buttons act here (the admin socket). On the
	// --status listener they do not, and the cards say how instead.
	Actions bool   `json:"-"`
	CSRF    string `json:"-"`
	// Message is the outcome of the last action, or why it did nothing.
	Message string `json:"-"`
}

// Host is what the page says of this computer.
type Host struct {
	Walls string `json:"walls"`
	// Switchboard says whether the supervisor's switchboard answers,
	// and with which handle.
	Switchboard   string `json:"switchboard"`
	SwitchboardUp bool   `json:"switchboard_up"`
	// Network is the label of the switchboard handle the supervisor
	// holds ("public" or "local"); "" when it does not answer.
	Network string `json:"network,omitempty"`
	// Down is why the switchboard does not answer; "" when it does.
	Down string `json:"down,omitempty"`
}

// NoticeView is one notice in the page's language.
type NoticeView struct {
	Kind      string    `json:"kind"`
	At        time.Time `json:"at"`
	Title     string    `json:"title"`
	Lines     []string  `json:"lines"`
	Delivered bool      `json:"delivered"`
	Error     string    `json:"error,omitempty"`
}

// Fact is one labelled fact of a vat, with one value or more.
type Fact struct {
	Key    string   `json:"key"`
	Label  string   `json:"label"`
	Values []string `json:"values"`
}

// FixIt is a Fix-it card: a vat off because its wall failed.
type FixIt struct {
	// Ref names the failure record; the card carries nothing else.
	Ref    string `json:"ref"`
	Reason string `json:"reason"`
	Remedy string `json:"remedy"`
}

// VatView is one vat on the page.
type VatView struct {
	ID string `json:"id"`
	// Word is the status word in the page's language; Class is a
	// fixed name of its kind (walled, unwalled, off, busy) for the
	// page's colours.
	Word  string `json:"word"`
	Class string `json:"class"`
	Tier  string `json:"tier,omitempty"`
	Code  string `json:"code"`
	// Grant is each grant in plain words.
	Grant []string `json:"grant"`
	// Facts are the rest, in order: only those it has.
	Facts     []Fact           `json:"facts"`
	Reach     []string         `json:"reach"`
	Decisions []activity.Entry `json:"decisions"`
	LogTail   string           `json:"log_tail"`
	FixIt     *FixIt           `json:"fixit,omitempty"`
	// Walled is the owner's choice to undo: it runs without its wall by
	// its owner's choice ("Wall it again").
	Unwalled bool `json:"unwalled_by_choice"`
}

// LogTailBytes is how much of each vat's output the page shows: its end.
const LogTailBytes = 8 << 10

// build makes the page in lang.
func (u *UI) build(ctx context.Context, lang string) Page {
	p := Page{Lang: lang, At: u.cfg.Now().UTC()}
	p.Host = u.host(ctx, lang)
	for _, n := range u.cfg.Notices.List() {
		nv := NoticeView{Kind: string(n.Kind), At: n.At, Title: n.Title.In(lang), Delivered: n.Delivered, Error: n.Error}
		for _, l := range n.Lines {
			nv.Lines = append(nv.Lines, l.In(lang))
		}
		p.Notices = append(p.Notices, nv)
	}
	for _, st := range u.cfg.Supervisor.List() {
		p.Vats = append(p.Vats, u.vatView(ctx, st, p.Host, lang))
	}
	return p
}

func (u *UI) host(ctx context.Context, lang string) Host {
	var h Host
	sw := u.cfg.Switches
	switch {
	case sw.Kill():
		h.Walls = words.PageWallsKill.In(lang)
	case sw.HostOff():
		h.Walls = words.PageWallsHostOff.In(lang)
	default:
		h.Walls = words.PageWallsOn.In(lang)
	}
	if u.cfg.Upstream == nil {
		h.Switchboard = words.PageSwitchboardNone.In(lang)
		return h
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	root, err := u.cfg.Upstream.Describe(ctx)
	if err != nil {
		h.Down = err.Error()
		h.Switchboard = words.PageSwitchboardDown.In(lang) + " (" + h.Down + ")"
		return h
	}
	h.SwitchboardUp, h.Network = true, root.Network
	h.Switchboard = words.PageSwitchboardUp.In(lang) + " (" + root.String() + ")"
	if n := root.Network; n != "" && root == (labels.Set{Network: n}) {
		h.Switchboard = words.PageSwitchboardUp.In(lang) + " (" + fmt.Sprintf(pick(lang, "its %s handle", "su handle %s"), map[string]string{"public": pick(lang, "public", "público"), "local": "local"}[n]) + ")"
	}
	return h
}

// vatView is one vat's facts, each from its status in one line: a fact
// added to supervisor.Status appears here with one more line.
func (u *UI) vatView(ctx context.Context, st supervisor.Status, h Host, lang string) VatView {
	w := st.Word()
	v := VatView{ID: string(st.ID), Word: pick(lang, st.Status, st.StatusES), Class: class(w), Code: st.Code}
	if st.PID > 0 {
		v.Tier = st.Tier // the tier of a spawn that runs, never of one that failed
	}
	if w == words.OffWall {
		rec := u.cfg.Fixit.Raise(st.ID, st.Code, st.LastError)
		v.FixIt = &FixIt{Ref: rec.Ref, Reason: st.LastError, Remedy: remedy(string(st.ID), st.LastError, lang)}
	} else {
		u.cfg.Fixit.Settle(st.ID)
	}
	for _, g := range st.Grant {
		v.Grant = append(v.Grant, reach.Grant(g, lang))
	}
	if len(v.Grant) == 0 {
		v.Grant = []string{words.PageNoGrant.In(lang)}
	} else if !h.SwitchboardUp && u.cfg.Upstream != nil {
		down := words.PageEgressDown
		if st.PID > 0 && st.Tier == "" {
			// It runs without a wall: only its Handle is cut off.
			down = words.PageEgressDownHandle
		}
		v.Grant = append(v.Grant, down.In(lang))
	}
	add := func(key string, label words.Phrase, values ...string) {
		var kept []string
		for _, x := range values {
			if x != "" {
				kept = append(kept, x)
			}
		}
		if len(kept) > 0 {
			v.Facts = append(v.Facts, Fact{Key: key, Label: label.In(lang), Values: kept})
		}
	}
	add("wall_line", words.PageWallLine, pick(lang, st.WallLine, st.WallLineES))
	add("damaged", words.PageLastError, st.Damaged)
	add("limits", words.PageLimits, u.limits(st, lang)...)
	add("dropped", words.PageDropped, st.Dropped...)
	add("doors", words.PageDoors, st.Doors...)
	add("mcp", words.PageMCP) // the MCP edge's facts, once supervisor.Status has them
	add("restarts", words.PageRestarts, fmt.Sprint(st.Restarts))
	add("last_exit", words.PageLastExit, st.LastExit)
	if v.FixIt == nil { // the card says why
		add("last_error", words.PageLastError, st.LastError)
	}
	if e, ok := u.cfg.Activity.LastRefusal(string(st.ID)); ok {
		add("last_refusal", words.PageLastRefusal, e.Target+": "+e.Reason+" ("+e.At.Format(time.RFC3339)+")")
	}
	v.Decisions = u.cfg.Activity.Recent(string(st.ID))
	v.Reach = reach.Explain(u.reachFacts(ctx, st, h), lang)
	if b, err := u.cfg.Supervisor.Logs(st.ID); err == nil {
		v.LogTail = logTail(b)
	}
	v.Unwalled = w == words.NotWalledChoice
	return v
}

// limits are the limits in force for st's running wall (its cgroup's
// memory, CPU and tasks, its data folder's size, the size of its /tmp),
// then each limit it runs without and why; none for a vat that runs
// unwalled, and nothing for one that does not run.
func (u *UI) limits(st supervisor.Status, lang string) []string {
	w := st.Word()
	if w.Unwalled() {
		return []string{words.PageNoLimits.In(lang)}
	}
	if st.PID == 0 || st.Limits == nil {
		return nil // nothing runs: nothing is held to a limit
	}
	l := *st.Limits
	var out []string
	if l.MemoryMiB > 0 {
		out = append(out, fmt.Sprintf(pick(lang, "memory %d MiB", "memoria %d MiB"), l.MemoryMiB))
	}
	if l.CPUs > 0 {
		en := "%g CPUs"
		if l.CPUs == 1 {
			en = "%g CPU"
		}
		out = append(out, fmt.Sprintf(pick(lang, en, "%g CPU"), l.CPUs))
	}
	if l.Tasks > 0 {
		out = append(out, fmt.Sprintf(pick(lang, "at most %d tasks (processes and threads)", "como mucho %d tareas (procesos e hilos)"), l.Tasks))
	}
	if l.DiskMiB > 0 {
		out = append(out, fmt.Sprintf(pick(lang, "data folder %d MiB", "carpeta de datos %d MiB"), l.DiskMiB))
	}
	if b := u.cfg.WallTmpBytes; b > 0 && (w == words.Walled || w == words.WalledNoSeccomp || w == words.NotAnswering) {
		out = append(out, fmt.Sprintf(pick(lang, "/tmp of %d MiB (memory)", "/tmp de %d MiB (memoria)"), b>>20))
	}
	names := make([]string, 0, len(st.Unlimited))
	for k := range st.Unlimited {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		out = append(out, fmt.Sprintf(pick(lang, "no %s limit: %s", "sin límite de %s: %s"), k, st.Unlimited[k]))
	}
	return out
}

func pick(lang, en, es string) string {
	if lang == "es" {
		return es
	}
	return en
}

// remedy is the fix the reason names (the wall's words carry "fix: ..."),
// then what the owner can always do.
func remedy(id, reason, lang string) string {
	generic := strings.ReplaceAll(words.PageFixItGeneric.In(lang), "<vat>", id)
	i := strings.Index(reason, "fix: ")
	if i < 0 {
		return generic
	}
	fix := reason[i+len("fix: "):]
	if j := strings.IndexAny(fix, ");"); j >= 0 {
		fix = fix[:j]
	}
	return strings.TrimSpace(fix) + ". " + generic
}

func class(w words.Word) string {
	switch {
	case w == words.Walled || w == words.WalledNoSeccomp:
		return "walled"
	case w.NotWalled():
		return "unwalled"
	case w.Off():
		return "off"
	}
	return "busy"
}

// logTail is the end of b as text, cut at a line start where it can be.
func logTail(b []byte) string {
	if len(b) > LogTailBytes {
		b = b[len(b)-LogTailBytes:]
		if i := strings.IndexByte(string(b), '\n'); i >= 0 && i < 512 {
			b = b[i+1:]
		}
	}
	s := string(b)
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}

// reachFacts are what reach.Explain needs of st: the grants that name an
// address on this computer or the LAN are asked of the switchboard, as
// the vat's own handle would ask (reach.AskSwitchboard), so what reach
// says of them is the switchboard's own decision.
func (u *UI) reachFacts(ctx context.Context, st supervisor.Status, h Host) reach.Facts {
	f := reach.Facts{
		ID: string(st.ID), Word: st.Word(), Grant: st.Grant, Dropped: st.Dropped, Doors: st.Doors,
		Network: h.Network, Down: h.Down, NoSwitchboard: u.cfg.Upstream == nil,
		Unwalled: st.PID > 0 && st.Tier == "",
	}
	if !h.SwitchboardUp {
		return f
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for i, g := range st.Grant {
		r, ok := reach.AskSwitchboard(g)
		if !ok {
			continue
		}
		if f.Now == nil {
			f.Now = map[int]reach.Verdict{}
		}
		v, err := u.cfg.Upstream.Check(ctx, st.ID, g, r)
		if err != nil {
			f.Now[i] = reach.Verdict{Unanswered: true, Reason: err.Error()}
			continue
		}
		f.Now[i] = reach.Verdict{Allow: v.Allow, Reason: v.Reason}
	}
	return f
}
