package supervisor

import (
	"fmt"
	"maps"
	"sort"
	"time"

	"toybox/labels"
	"toybox/vat/grant"
	"toybox/vat/manifest"
	"toybox/vat/store"
	"toybox/vat/wall/cgroup"
	"toybox/vat/words"
)

// Status is what GET /<vat> answers.
type Status struct {
	ID        labels.VatID `json:"id"`
	Status    string       `json:"status"`
	StatusES  string       `json:"status_es"`
	Tier      string       `json:"tier,omitempty"`
	Code      string       `json:"code"`
	Grant     []labels.Set `json:"grant"`
	PID       int          `json:"pid,omitempty"`
	Restarts  int          `json:"restarts"`
	LastExit  string       `json:"last_exit,omitempty"`
	LastError string       `json:"last_error,omitempty"`
	Installed time.Time    `json:"installed"`
	// UID is the vat's own host uid, when it has one.
	UID   int      `json:"uid,omitempty"`
	Env   []string `json:"env,omitempty"`
	Doors []string `json:"doors,omitempty"`
	// Dropped lists the manifest's loopback addresses the vat runs
	// without, and why (the manifest-defaults rule).
	Dropped []string `json:"dropped,omitempty"`
	// Limits are the limits its running wall is held to: only those
	// enforced. Unlimited names each other limit and why it has none.
	Limits    *InForce          `json:"limits,omitempty"`
	Unlimited map[string]string `json:"unlimited,omitempty"`
	// OwnLimits are the owner's own limits (PUT ?memory_mib=...).
	OwnLimits store.Limits `json:"own_limits,omitzero"`
	// Damaged says that the vat's record cannot be read, what it runs
	// from meanwhile, and how to repair it.
	Damaged string `json:"damaged,omitempty"`
	// MCP holds the MCP facts of an MCP server vat (docs/mcp.md).
	MCP *MCPStatus `json:"mcp,omitempty"`
	// WallLine says what its wall lets it read and change beyond its own
	// folders, ending, for a walled vat, with the one fixed sentence of
	// what no wall covers (docs/walls.md); in English and Spanish.
	WallLine   string `json:"wall_line,omitempty"`
	WallLineES string `json:"wall_line_es,omitempty"`
	// Egress says how its running wall's programs get out: transparent
	// (every connect through its grant) or the proxy alone, and why.
	Egress   string `json:"egress,omitempty"`
	EgressES string `json:"egress_es,omitempty"`
	// LastRefusal is its most recent egress refusal (since the
	// supervisor started it last).
	LastRefusal *grant.Refusal `json:"last_refusal,omitempty"`

	word             words.Word
	detail, detailES string
}

// Word returns the status word.
func (st Status) Word() words.Word { return st.word }

// WordDetail returns what the status word names beside it (a memory
// limit, the shares of "not walled: shares <names>"), or "".
func (st Status) WordDetail() string { return st.detail }

// WordDetailES returns WordDetail in Spanish.
func (st Status) WordDetailES() string { return st.detailES }

func (s *Supervisor) status(v *vat) Status {
	v.mu.Lock()
	defer v.mu.Unlock()
	g := v.grant
	if g == nil {
		g = []labels.Set{}
	}
	detail := ""
	switch v.word {
	case words.OffMemory:
		detail = v.wordDetail
	case words.NotWalledShares:
		detail = v.facts.shareNames()
	}
	detailES := detail
	if v.word.Unwalled() && v.word != words.NotWalledNoBwrapDocker && v.facts.docker {
		// Whoever holds that socket is root on the host: the word says
		// so, whatever switch unwalled the vat.
		detail, detailES = words.PageDockerReachable.In("en"), words.PageDockerReachable.In("es")
	}
	st := Status{
		ID: v.id, Status: v.word.With("en", detail), StatusES: v.word.With("es", detailES), Tier: v.tier, detailES: detailES,
		Code: v.rec.Code, Grant: g, PID: v.pid, Restarts: v.restarts,
		LastExit: v.lastExit, LastError: v.lastError, Installed: v.rec.Installed, UID: v.rec.UID, word: v.word, detail: detail,
		Doors:     append([]string(nil), v.doors...),
		Dropped:   droppedText(v.dropped),
		OwnLimits: v.rec.Limits,
		Damaged:   v.damaged,
		MCP:       s.mcpStatus(v),
	}
	eg, why := egressInForce(v.egress, v.egressWhy, v.gv)
	st.Egress, st.EgressES = eg.With("en", why), eg.With("es", why)
	if v.gv != nil {
		if r, ok := v.gv.LastRefusal(); ok {
			st.LastRefusal = &r
		}
	}
	if v.word.Routed() {
		st.WallLine, st.WallLineES = v.facts.line("en"), v.facts.line("es")
	}
	if v.pid > 0 {
		in := v.inForce
		st.Limits = &in
		st.Unlimited = maps.Clone(v.unlimited)
		if in.MemoryMiB > 0 {
			// Swap may have come or gone since the wall started
			// (swapon): judged now, never claimed from then.
			delete(st.Unlimited, limSwap)
			if why := s.cfg.Cgroups.Support().Missing[cgroup.Swap]; why != "" {
				if st.Unlimited == nil {
					st.Unlimited = map[string]string{}
				}
				st.Unlimited[limSwap] = why
			}
		}
	}
	for k := range v.rec.Env {
		st.Env = append(st.Env, k)
	}
	sort.Strings(st.Env)
	return st
}

// Status returns the status of vat id; for a stdio MCP vat, with its
// bridge's live counters.
func (s *Supervisor) Status(id labels.VatID) (Status, error) {
	v, ok := s.get(id)
	if !ok {
		return Status{}, fmt.Errorf("%w: %q", ErrNoVat, id)
	}
	st := s.status(v)
	if st.MCP != nil && st.MCP.Transport == manifest.TransportStdio {
		if in, _, _ := s.serving(string(id)); in != nil {
			st.MCP.Bridge = bridgeStats(s.ctx, in)
		}
	}
	return st, nil
}

// List returns every vat's status, by id.
func (s *Supervisor) List() []Status {
	s.mu.Lock()
	vs := make([]*vat, 0, len(s.vats))
	for _, v := range s.vats {
		vs = append(vs, v)
	}
	s.mu.Unlock()
	out := make([]Status, 0, len(vs))
	for _, v := range vs {
		out = append(out, s.status(v))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Logs returns the tail of vat id's output.
func (s *Supervisor) Logs(id labels.VatID) ([]byte, error) {
	v, ok := s.get(id)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNoVat, id)
	}
	return v.logs.Bytes(), nil
}

// serving returns the running instance of vat id, or why there is none.
func (s *Supervisor) serving(id string) (*instance, words.Word, bool) {
	v, ok := s.find(id)
	if !ok {
		return nil, words.Unknown, false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.run == nil || !v.word.Routed() {
		return nil, v.word, true
	}
	return v.run, v.word, true
}

func droppedText(ds []grant.Dropped) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.String())
	}
	return out
}
