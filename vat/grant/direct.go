package grant

import (
	"context"
	"errors"
	"fmt"
	"os"

	"capnproto.org/go/capnp/v3"

	"toybox/labels"
	"toybox/schema"
)

// maxDirectReports is how many reports one reportDirect call may carry.
const maxDirectReports = 4096

// maxDirectConns is how many direct connections one run of a wall (one
// toybox-entry connection) is handed in all. Each is a handle on the
// supervisor's switchboard session, which every vat shares and the
// switchboard bounds (limits.handles, 8192): an entry that asked again
// and kept every one would leave other vats none. The entry asks at its
// start, when the grant changes, and when it has lost every one (the
// switchboard restarted), keeping one per member: a few each time.
// Past the bound it is refused, and its connects go through the relay.
const maxDirectConns = 256

// errEntryOnly refuses a direct connection to any peer but toybox-entry.
var errEntryOnly = errors.New("only toybox-entry is given direct switchboard connections")

// Socket is refused on a vat's Handle: a switchboard connection is one
// per grant member, which Vat.direct hands to toybox-entry alone.
func (h *handleServer) Socket(context.Context, schema.Handle_socket) error {
	return fmt.Errorf("vat %s: %w (a vat's Handle makes none)", h.v.cfg.ID, errEntryOnly)
}

// Revoke is refused on a vat's Handle: its grant is the owner's to change.
func (h *handleServer) Revoke(context.Context, schema.Handle_revoke) error {
	return fmt.Errorf("vat %s: a vat's Handle is not revoked by the vat: its grant is the owner's to change", h.v.cfg.ID)
}

// Direct hands toybox-entry one switchboard connection per member of the
// vat's grant, each bootstrapped with that member's handle on the
// supervisor's upstream session (Handle.socket): so made from it, and
// shut by the switchboard when the supervisor releases it (the member
// leaves the grant: SetGrants; the vat stops: Revoke) or its session ends.
//
// Why only the entry: a switchboard connection hands over sockets of the
// switchboard's network namespace, which must never be in an app's hands
// (relayed).
func (s *vatServer) Direct(ctx context.Context, call schema.Vat_direct) error {
	if !s.entry {
		return fmt.Errorf("vat %s: %w", s.v.cfg.ID, errEntryOnly)
	}
	if err := s.v.checkLive(); err != nil {
		return err
	}
	done, err := s.v.acquire()
	if err != nil {
		return err
	}
	defer done()
	call.Go()
	// The connections are all made before any is passed on, and passed
	// on only while their generation is the grant's: made across a
	// SetGrants, they are dropped and made again.
	var ms []labels.Set
	var gen uint64
	var files []*os.File
	for attempt := 0; ; attempt++ {
		ms, gen = s.v.current()
		if err := s.hand(len(ms), false); err != nil {
			return err // before any is made
		}
		files, err = s.directAll(ctx, ms)
		if err != nil {
			return err
		}
		if _, now := s.v.current(); now == gen || attempt == 2 {
			break
		}
		closeAll(files)
	}
	if _, now := s.v.current(); now != gen {
		closeAll(files)
		return errGrantChanged
	}
	if err := s.v.checkLive(); err != nil {
		closeAll(files) // their bootstraps are revoked with the vat
		return err
	}
	if err := s.hand(len(files), true); err != nil {
		closeAll(files)
		return err
	}
	var seqs []uint64
	for i, f := range files {
		seq, err := s.down.SendOwned(f) // takes f
		if err != nil {
			closeAll(files[i+1:])
			return fmt.Errorf("handing the switchboard's connection to the entry: %w", err)
		}
		seqs = append(seqs, seq)
	}
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	l, err := res.NewFds(int32(len(seqs)))
	if err != nil {
		return err
	}
	for i, q := range seqs {
		l.Set(i, q)
	}
	ml, err := res.NewMembers(int32(len(ms)))
	if err != nil {
		return err
	}
	for i, m := range ms {
		if err := toSchema(ml.At(i), m); err != nil {
			return err
		}
	}
	res.SetGen(gen)
	return nil
}

// hand reports whether n more direct connections may be handed to this
// entry, within maxDirectConns, and with count counts them. The first
// ask always gets its set (a grant of more members than the bound has no
// other way to one hop).
func (s *vatServer) hand(n int, count bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.handed > 0 && s.handed+n > maxDirectConns {
		return fmt.Errorf("vat %s: this wall has been handed %d direct switchboard connections, the most one run of it is (%d): its connects go through the supervisor", s.v.cfg.ID, s.handed, maxDirectConns)
	}
	if count {
		s.handed += n
	}
	return nil
}

// errGrantChanged ends a Vat.direct whose grant was replaced while it made
// the connections: the entry asks again (grantChanged answers at once).
var errGrantChanged = errors.New("the grant changed meanwhile; ask again")

// GrantChanged answers once the vat's grant generation is not the one the
// entry names, with the new one; it fails when the vat stops. The entry
// keeps one such call waiting, and asks Direct again when it answers.
func (s *vatServer) GrantChanged(ctx context.Context, call schema.Vat_grantChanged) error {
	if !s.entry {
		return fmt.Errorf("vat %s: %w", s.v.cfg.ID, errEntryOnly)
	}
	call.Go()
	known := call.Args().Gen()
	for {
		s.v.mu.Lock()
		revoked, gen, changed := s.v.revoked, s.v.gen, s.v.changed
		s.v.mu.Unlock()
		if revoked {
			return fmt.Errorf("egress revoked: vat %s stopped", s.v.cfg.ID)
		}
		if gen != known {
			res, err := call.AllocResults()
			if err != nil {
				return err
			}
			res.SetGen(gen)
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// directAll makes one switchboard connection per member of ms (closing
// those made when one fails).
func (s *vatServer) directAll(ctx context.Context, ms []labels.Set) ([]*os.File, error) {
	var files []*os.File
	for _, m := range ms {
		f, err := s.directOne(ctx, m)
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("a direct switchboard connection for %s: %w", m, err)
		}
		files = append(files, f)
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		_ = f.Close() // the switchboard revokes its bootstrap
	}
}

// directOne asks the switchboard for a connection bootstrapped with m's
// handle; a disconnect is retried once on a fresh session. The caller
// passes it on only if the grant is still the one m is a member of:
// SetGrants released the handles of the members it removed, and one made
// anew after it would be revoked by nothing.
func (s *vatServer) directOne(ctx context.Context, m labels.Set) (*os.File, error) {
	var last error
	for attempt := 0; attempt < 2; attempt++ {
		up, sess, err := s.v.upstream(ctx, m)
		if err != nil {
			return nil, err
		}
		fut, release := up.Socket(ctx, nil)
		res, err := fut.Struct()
		var seq uint64
		if err == nil {
			seq = res.Fd()
		}
		release()
		up.Release()
		if err != nil {
			if capnp.IsDisconnected(err) {
				s.v.cfg.Upstream.broken(sess.gen)
				last = err
				continue
			}
			return nil, err
		}
		f, err := sess.conn.TakeFD(seq)
		if err != nil {
			return nil, fmt.Errorf("taking the switchboard's connection: %w", err)
		}
		return f, nil
	}
	return nil, last
}

// ReportDirect takes toybox-entry's reports of the connects it made on
// direct connections, for the vat's status and metrics (OnDecision), as
// the relay reports its own. Refusals are not reported here: the entry
// asks the relay again for what every direct connection refused, and the
// relay reports that.
func (s *vatServer) ReportDirect(_ context.Context, call schema.Vat_reportDirect) error {
	if !s.entry {
		return fmt.Errorf("vat %s: %w", s.v.cfg.ID, errEntryOnly)
	}
	rs, err := call.Args().Reports()
	if err != nil {
		return err
	}
	if rs.Len() > maxDirectReports {
		return fmt.Errorf("vat %s: %d reports in one call (at most %d)", s.v.cfg.ID, rs.Len(), maxDirectReports)
	}
	for i := 0; i < rs.Len(); i++ {
		r := rs.At(i)
		t, err := schema.ReadTarget(r.Target())
		if err != nil {
			return err
		}
		req, err := targetRequest(t)
		if err != nil {
			continue
		}
		var why error
		if !r.Allowed() {
			reason, _ := r.Reason()
			why = errors.New(reason)
		}
		s.v.decided("connect", req, why)
	}
	return nil
}
