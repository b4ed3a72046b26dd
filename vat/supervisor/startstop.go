package supervisor

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"toybox/vat/wall"
	"toybox/vat/words"
)

// Start starts every installed vat. A record that cannot be loaded leaves
// that vat off with the reason; the others still start. It returns once
// every vat has been launched (not necessarily ready).
func (s *Supervisor) Start() error {
	// A wall an earlier supervisor of this state dir left running (it was
	// killed while the wall was being set up) would run beside the one
	// started now, on the same data folder.
	if n, err := wall.EndLeftovers(s.cfg.Store.StateDir()); err != nil {
		s.log.Error("ending walls an earlier supervisor left running", keyErr, err)
	} else if n > 0 {
		s.log.Warn("ended walls an earlier supervisor left running", "walls", n)
	}
	// Their cgroups too (a wall's goes when it ends; not a killed
	// supervisor's).
	if n, err := s.cfg.Cgroups.Sweep(); err != nil {
		s.log.Warn("removing the cgroups of walls an earlier supervisor left", keyErr, err)
	} else if n > 0 {
		s.log.Info("removed the cgroups of walls an earlier supervisor left", "cgroups", n)
	}
	// A package install's prepare folders go when it ends; a supervisor
	// killed during one left them (tarballs, tree, bundle). No install
	// runs before Start returns.
	s.removePrepareFolders()
	// No wall runs yet (walls end with the supervisor): views of /etc
	// left from an earlier run are cleared, and built again on demand.
	if err := s.walls.SweepViews(s.cfg.Store.StateDir()); err != nil {
		s.log.Warn("clearing old /etc views", keyErr, err)
	}
	// The view every plain wall binds, built now rather than by the first
	// spawn (a spawn that comes meanwhile waits for this same build).
	go func() {
		if err := s.walls.PrepareEtcView(s.cfg.Store.StateDir()); err != nil {
			s.log.Warn("preparing the walls' /etc", keyErr, err)
		}
	}()
	recs, bad, rerr := s.cfg.Store.Records()
	if rerr != nil {
		s.log.Error("reading installed vats", keyErr, rerr)
	}
	if rerr == nil {
		s.retireOrphans()
	}
	// A record that cannot be read keeps its vat listed, its id and uid
	// taken: from its good copy, or off with the reason.
	damage := map[string]string{}
	for _, d := range bad {
		if rec, text := s.loadDamaged(d); rec != nil {
			recs = append(recs, *rec)
			damage[string(d.ID)] = text
		}
	}
	// Load every record first, so that uids handed to records that have
	// none never collide with a uid a later record holds.
	var load []*vat
	for _, rec := range recs {
		v := &vat{id: rec.ID, logs: newRing(s.cfg.LogBytes), rec: rec, word: words.Starting, damaged: damage[string(rec.ID)]}
		code, err := s.cfg.Store.Code(rec.Code)
		if err == nil {
			v.code = code
			v.grant, v.dropped, err = s.grantFor(code, rec.Egress)
			s.logDropped(string(rec.ID), v.dropped)
		}
		if err != nil {
			v.word, v.lastError = words.OffStopped, "loading its code: "+err.Error()
			s.log.Error("vat not started", keyVat, rec.ID, keyCode, rec.Code, keyErr, err)
		} else {
			load = append(load, v)
		}
		s.mu.Lock()
		s.vats[rec.ID] = v
		s.mu.Unlock()
	}
	var wg sync.WaitGroup
	for _, v := range load {
		if v.rec.UID == 0 && s.cfg.UIDBase >= 0 {
			uid, err := s.allocUID(v)
			if err != nil {
				v.word, v.lastError = words.OffStopped, "giving it a uid: "+err.Error()
				s.log.Error("vat not started", keyVat, v.id, keyErr, err)
				continue
			}
			v.mu.Lock()
			v.rec.UID = uid
			rec := v.rec
			v.mu.Unlock()
			if err := s.cfg.Store.SaveRecord(rec); err != nil {
				s.log.Error("saving the vat's uid", keyVat, rec.ID, keyErr, err)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			v.op.Lock()
			defer v.op.Unlock()
			in := s.launch(v)
			v.mu.Lock()
			v.run = in
			probed := v.rec.MCPProbe != nil && v.rec.MCPProbe.Code == v.rec.Code
			v.mu.Unlock()
			if in.mcp != nil && !probed {
				go s.probeLater(v, in)
			}
		}()
	}
	wg.Wait()
	if rerr == nil {
		s.pruneCode()
	}
	return rerr
}

// retireOrphans retires the folders of vats removed before Remove retired
// them (an earlier version left them with their uids, which new vats get
// again).
func (s *Supervisor) retireOrphans() {
	orphans, err := s.cfg.Store.Orphans()
	if err != nil {
		s.log.Warn("listing removed vats' folders", keyErr, err)
		return
	}
	for _, id := range orphans {
		if err := s.cfg.Store.Retire(id); err != nil {
			s.log.Warn("retiring a removed vat's folders", keyVat, id, keyErr, err)
		}
	}
}

// probeLater probes an MCP vat installed before its probe was recorded
// (by an older toybox), once its instance serves, and keeps what it
// learned in its record.
func (s *Supervisor) probeLater(v *vat, in *instance) {
	if in.waitReady() != nil {
		return
	}
	v.op.Lock()
	defer v.op.Unlock()
	v.mu.Lock()
	current, code := v.run == in, v.rec.Code
	v.mu.Unlock()
	if !current {
		return
	}
	snap := s.probeMCP(s.ctx, in, code)
	v.mu.Lock()
	v.rec.MCPProbe = snap
	rec := v.rec
	v.mu.Unlock()
	if err := s.cfg.Store.SaveRecord(rec); err != nil {
		s.log.Warn("saving the MCP probe", keyVat, v.id, keyErr, err)
	}
}

// pruneCode removes stored code that no vat uses: after a removal, after an
// install (the version an upgrade replaced, the code of a failed one), and
// at start. Code an install is still using is pinned (store.Put); when any
// record cannot be read, nothing is removed.
func (s *Supervisor) pruneCode() {
	_, err := s.cfg.Store.Prune(func() (map[string]bool, error) {
		recs, bad, err := s.cfg.Store.Records()
		if err != nil {
			return nil, fmt.Errorf("reading the installed vats: %w", err)
		}
		used := map[string]bool{}
		for _, r := range recs {
			used[strings.TrimPrefix(r.Code, "sha256:")] = true
		}
		// A damaged record keeps every code its bytes or its good copy
		// name; one that names none could need any.
		for _, d := range bad {
			if len(d.Codes) == 0 {
				return nil, fmt.Errorf("the record of %s cannot be read and names no code", d.ID)
			}
			for _, c := range d.Codes {
				used[strings.TrimPrefix(c, "sha256:")] = true
			}
		}
		s.mu.Lock()
		for _, v := range s.vats {
			v.mu.Lock()
			used[strings.TrimPrefix(v.rec.Code, "sha256:")] = true
			used[v.code.Digest] = true
			for _, c := range v.keepCodes {
				used[strings.TrimPrefix(c, "sha256:")] = true
			}
			v.mu.Unlock()
		}
		s.mu.Unlock()
		return used, nil
	})
	if err != nil {
		s.log.Warn("removing unused code", keyErr, err)
	}
}

// Shutdown stops every vat (SIGTERM, then SIGKILL after the grace period)
// and returns when all are gone or ctx ends.
func (s *Supervisor) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.stopping {
		close(s.stopped)
	}
	s.stopping = true
	vs := make([]*vat, 0, len(s.vats))
	for _, v := range s.vats {
		vs = append(vs, v)
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, v := range vs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v.op.Lock() // let an operation in progress finish first
				defer v.op.Unlock()
				v.mu.Lock()
				in := v.run
				v.mu.Unlock()
				if in != nil {
					in.stopAndWait()
				}
				v.setWord(words.OffShutdown)
			}()
		}
		wg.Wait()
		// Package installs preparing end too (cancelled when stopped
		// closed): their walls stopped, their folders removed.
		s.preparing.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.cancel()
	// The data folders' file systems go with the supervisor (a vat still
	// stopping keeps its own until it is gone: detached).
	if derr := s.cfg.Disks.Close(); derr != nil {
		s.log.Warn("unmounting the data folders", keyErr, derr)
	}
	// A revocation the tokens file could not hold yet is written a last
	// time; one it still cannot hold is lost at this restart: said loudly.
	if terr := s.tokens.Close(); terr != nil {
		s.log.Error("revoked tokens not stored", keyErr, terr)
	}
	return err
}
