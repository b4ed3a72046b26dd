package grant

import (
	"context"
	"errors"
	"fmt"

	"capnproto.org/go/capnp/v3"

	"toybox/labels"
	"toybox/schema"
)

// maxDirectReports is how many reports one reportDirect call may carry.
const maxDirectReports = 4096

// errEntryOnly refuses a direct connection to any peer but toybox-entry.
var errEntryOnly = errors.New("only toybox-entry is given direct switchboard connections")

// Socket is refused on a vat's Handle: a switchboard connection is one
// per grant member, which Vat.direct hands to toybox-entry alone.
func (h *handleServer) Socket(context.Context, schema.Handle_socket) error {
	return fmt.Errorf("vat %s: %w (a vat's Handle makes none)", h.v.cfg.ID, errEntryOnly)
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
	ms, _ := s.v.current()
	var seqs []uint64
	for _, m := range ms {
		seq, err := s.directOne(ctx, m)
		if err != nil {
			return fmt.Errorf("a direct switchboard connection for %s: %w", m, err)
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
	return nil
}

// directOne asks the switchboard for a connection bootstrapped with m's
// handle and passes it on to the entry; a disconnect is retried once on a
// fresh session.
func (s *vatServer) directOne(ctx context.Context, m labels.Set) (uint64, error) {
	var last error
	for attempt := 0; attempt < 2; attempt++ {
		up, sess, err := s.v.upstream(ctx, m)
		if err != nil {
			return 0, err
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
			return 0, err
		}
		f, err := sess.conn.TakeFD(seq)
		if err != nil {
			return 0, fmt.Errorf("taking the switchboard's connection: %w", err)
		}
		if err := s.v.checkLive(); err != nil {
			_ = f.Close() // its bootstrap is revoked with the vat
			return 0, err
		}
		nseq, err := s.down.SendOwned(f) // takes f
		if err != nil {
			return 0, fmt.Errorf("handing the switchboard's connection to the entry: %w", err)
		}
		return nseq, nil
	}
	return 0, last
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
