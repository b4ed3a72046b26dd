package grant

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"capnproto.org/go/capnp/v3"

	"toybox/labels"
	"toybox/schema"
)

// SetGrants replaces the vat's egress grants while it runs. Its Handles
// (those handed out, and every narrowing of them) judge each later call
// by the new grants. Every switchboard handle the new grants do not wholly
// contain is revoked before it returns, so the switchboard shuts every connection,
// request and WebSocket made through it: nothing the new grants would
// refuse stays open. A connection the new grants still admit, but that
// was made through a wider grant than any of them, is shut too (the
// supervisor does not know each connection's target), and the app
// connects again.
func (v *Vat) SetGrants(grants []labels.Set) error {
	members, err := memberSets(v.cfg.ID, grants)
	if err != nil {
		return err
	}
	if len(members) > 0 && v.cfg.Upstream == nil {
		return fmt.Errorf("a vat with a grant needs the supervisor's switchboard upstream")
	}
	held := v.hold(members)
	var gone []schema.Handle
	v.mu.Lock()
	if v.revoked {
		v.mu.Unlock()
		return fmt.Errorf("vat %s: %w", v.cfg.ID, ErrRevoked)
	}
	oldHeld := v.held
	v.members, v.held = members, held
	v.gen++
	changed := v.changed
	v.changed = make(chan struct{})
	for key, e := range v.cache {
		if covered(e.set, members) {
			continue
		}
		delete(v.cache, key)
		if e.idle != nil {
			v.idle.Remove(e.idle)
			e.idle = nil
		}
		if e.h.IsValid() {
			gone = append(gone, e.h)
			e.h = schema.Handle{}
		}
	}
	v.mu.Unlock()
	v.drop(oldHeld)
	// Revoked before SetGrants returns, not only released: a release
	// takes effect at the switchboard some time after, and
	// toybox-entry's direct connections reach it on connections of their
	// own, which would connect for a removed member meanwhile.
	unconfirmed := revokeNow(gone)
	close(changed)
	if unconfirmed > 0 {
		v.log.Warn("egress grant changed, revocation unconfirmed", "grant", fmt.Sprint(members), "revoked_handles", len(gone), "unconfirmed", unconfirmed)
		return fmt.Errorf("vat %s: %w: %d of %d handles (within %s)", v.cfg.ID, ErrRevokeUnconfirmed, unconfirmed, len(gone), revokeTimeout)
	}
	v.log.Info("egress grant changed", "grant", fmt.Sprint(members), "revoked_handles", len(gone))
	return nil
}

// revokeTimeout bounds the wait for the switchboard in revokeNow (a
// variable for tests).
var revokeTimeout = 5 * time.Second

// revokeNow revokes each of hs at the switchboard, all at once, waits for
// the answers (or revokeTimeout), and releases hs. A handle of a session
// that has ended fails at once: its connection took it with it. It
// returns how many revocations had no answer by the deadline: those the
// switchboard may not have made yet.
func revokeNow(hs []schema.Handle) (unconfirmed int) {
	if len(hs) == 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
	defer cancel()
	type pending struct {
		fut     schema.Handle_revoke_Results_Future
		release capnp.ReleaseFunc
	}
	ps := make([]pending, 0, len(hs))
	for _, h := range hs {
		fut, release := h.Revoke(ctx, nil)
		ps = append(ps, pending{fut, release})
	}
	for i, p := range ps {
		// An error: revoked already, gone with its session, or (once the
		// deadline passed) no answer.
		if _, err := p.fut.Struct(); err != nil && ctx.Err() != nil {
			unconfirmed++
		}
		p.release()
		hs[i].Release()
	}
	return unconfirmed
}

// covered reports whether every request m admits, one of members admits:
// m is at least as narrow as a member.
func covered(m labels.Set, members []labels.Set) bool {
	for _, g := range members {
		if c, err := labels.Constrain(m, g); err == nil && c == m {
			return true
		}
	}
	return false
}

// Outcome is what became of one egress call.
type Outcome int

// Outcomes.
const (
	// Allowed: the switchboard made the connection (or began the request).
	Allowed Outcome = iota + 1
	// Refused: the grant or the switchboard refused it, with a reason.
	Refused
	// Failed: admitted, but it failed (the remote refused, a timeout).
	Failed
)

func (o Outcome) String() string {
	switch o {
	case Allowed:
		return "allowed"
	case Refused:
		return "refused"
	case Failed:
		return "failed"
	}
	return "unknown"
}

// Decision is what became of one egress call of a vat.
type Decision struct {
	// Op is "connect", "request" or "webSocket", or "check" for a
	// check that was refused (toybox-entry checks before it connects).
	Op string
	// Target is what was asked for: scheme, host and port.
	Target  labels.Request
	Outcome Outcome
	// Reason is why it was refused (without "egress refused: "), or how
	// it failed; empty when allowed. At most maxKeptBytes and the words
	// that say how many more there were.
	Reason string
}

// TargetText is the target as scheme://host:port.
func (d Decision) TargetText() string {
	t := d.Target
	host := t.Host
	if host == "" {
		host = "?"
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	port := t.Port
	if port == 0 {
		port = labels.DefaultPort(t.Scheme)
	}
	s := host
	if port != 0 {
		s += ":" + strconv.Itoa(int(port))
	}
	if t.Scheme != "" {
		s = t.Scheme + "://" + s
	}
	return s
}

// decided reports one decision to the vat's OnDecision.
func (v *Vat) decided(op string, r labels.Request, err error) {
	if v.cfg.OnDecision == nil {
		return
	}
	d := Decision{Op: op, Target: r, Outcome: Allowed}
	if err != nil {
		d.Reason = err.Error()
		d.Outcome = Failed
		if reason, ok := labels.RefusalReason(err); ok {
			d.Outcome, d.Reason = Refused, reason
		}
	}
	d.Reason = clip(d.Reason)
	v.cfg.OnDecision(d)
}

// decidedURL is decided for a call that names a URL.
func (v *Vat) decidedURL(op, url string, err error) {
	if v.cfg.OnDecision == nil {
		return
	}
	r, _ := labels.ParseURL(url)
	v.decided(op, r, err)
}

// Describe returns the labels of the switchboard's root handle on the
// supervisor's own connection: the most any vat can reach. An error says
// the switchboard is not answering (or refused to say).
func (u *Upstream) Describe(ctx context.Context) (labels.Set, error) {
	var last error
	for attempt := 0; attempt < 2; attempt++ {
		sess, err := u.current(ctx)
		if err != nil {
			return labels.Set{}, err
		}
		fut, release := sess.root.Describe(ctx, nil)
		res, err := fut.Struct()
		if err != nil {
			release()
			if capnp.IsDisconnected(err) {
				u.broken(sess.gen)
				last = err
				continue
			}
			return labels.Set{}, err
		}
		l, err := res.Labels()
		if err != nil {
			release()
			return labels.Set{}, err
		}
		s, err := fromSchema(l)
		release()
		return s, err
	}
	return labels.Set{}, last
}

// Sockets returns how many connections of the vat's app the supervisor
// relays now.
func (v *Vat) Sockets() int64 { return v.sockets.Load() }

// Verdict is the switchboard's decision on one target for one handle.
type Verdict struct {
	Allow bool
	// Reason is why it was refused (without "egress refused: "); empty
	// when allowed.
	Reason string
}

// Check asks the switchboard what a handle of vat id holding grant g
// would decide for r: the root handle on the supervisor's own connection,
// constrained as the vat's own member is (g and vat: id), then check()ed,
// so the answer is the switchboard's own, listener-owner check included.
// An exception the switchboard raises (a constrain it refuses) is a
// refusal with its text. An error says the switchboard did not answer
// (or g and id conflict).
func (u *Upstream) Check(ctx context.Context, id labels.VatID, g labels.Set, r labels.Request) (Verdict, error) {
	ms, err := memberSets(id, []labels.Set{g})
	if err != nil {
		return Verdict{}, err
	}
	m := ms[0]
	var last error
	for attempt := 0; attempt < 2; attempt++ {
		sess, err := u.current(ctx)
		if err != nil {
			return Verdict{}, err
		}
		cf, crelease := sess.root.Constrain(ctx, func(p schema.Handle_constrain_Params) error {
			l, err := p.NewLabels()
			if err != nil {
				return err
			}
			return toSchema(l, m)
		})
		h := cf.Handle()
		fut, release := h.Check(ctx, func(p schema.Handle_check_Params) error {
			return schema.TargetFields{Scheme: r.Scheme, Host: r.Host, Port: r.Port}.Set(p.NewTarget)
		})
		v, err := func() (Verdict, error) {
			res, err := fut.Struct()
			if err != nil {
				return Verdict{}, err
			}
			d, err := res.Decision()
			if err != nil {
				return Verdict{}, err
			}
			if d.Allow() {
				return Verdict{Allow: true}, nil
			}
			reason, err := d.Reason()
			return Verdict{Reason: reason}, err
		}()
		release()
		h.Release()
		crelease()
		if err != nil {
			if capnp.IsDisconnected(err) {
				u.broken(sess.gen)
				last = err
				continue
			}
			if reason, ok := labels.RefusalReason(err); ok {
				return Verdict{Reason: reason}, nil
			}
			if ctx.Err() != nil {
				return Verdict{}, err // it did not answer in time
			}
			// The switchboard's own exception: the vat's member fails
			// the same way (a grant that conflicts with its handle, say).
			return Verdict{Reason: err.Error()}, nil
		}
		return v, nil
	}
	return Verdict{}, last
}
