package supervisor

import (
	"errors"
	"fmt"
	"os"

	"toybox/labels"
	"toybox/vat/disk"
	"toybox/vat/store"
	"toybox/vat/switches"
	"toybox/vat/words"
)

// Restart stops vat id and starts it again on the same code, clearing its
// crash count. It revives a vat that is off.
func (s *Supervisor) Restart(id labels.VatID) (Status, error) {
	st, _, err := s.restart(id)
	return st, err
}

// restart is Restart, which also returns why the vat did not come up
// (nil when it did).
func (s *Supervisor) restart(id labels.VatID) (_ Status, ready, _ error) {
	v, err := s.lockVat(id, false)
	if err != nil {
		return Status{}, nil, err
	}
	defer v.op.Unlock()
	v.mu.Lock()
	in, loaded := v.run, v.code.Manifest != nil
	if in != nil {
		in.markStopping(words.Stopping)
	}
	v.mu.Unlock()
	if in != nil {
		in.stopAndWait()
	}
	if !loaded {
		v.mu.Lock()
		damaged := v.damaged
		v.mu.Unlock()
		if damaged != "" {
			return s.status(v), nil, fmt.Errorf("%w: vat %s: %s", ErrBadInput, id, damaged)
		}
		return s.status(v), nil, fmt.Errorf("%w: vat %s has no loadable code", ErrBadInput, id)
	}
	v.mu.Lock()
	v.restarts, v.lastError, v.word = 0, "", words.Starting
	v.mu.Unlock()
	in = s.launch(v)
	v.mu.Lock()
	v.run = in
	v.mu.Unlock()
	ready = in.waitReady()
	return s.status(v), ready, nil
}

// Remove stops vat id and deletes its record; with purge, its data too.
// With purge, an id no longer installed has what it left removed: the
// data a removal without purge kept, or a purge cut short left.
func (s *Supervisor) Remove(id labels.VatID, purge bool) error {
	v, err := s.lockVat(id, false)
	if errors.Is(err, ErrNoVat) && purge {
		return s.purgeKept(id)
	}
	if err != nil {
		return err
	}
	defer v.op.Unlock()
	// The owner's choice to run this vat without a wall goes with it: code
	// installed later under the same id is walled unless chosen again.
	// Cleared first: a failure to clear it stops nothing. (Should removing
	// the record fail after it, the vat stays installed, walled.)
	if err := s.cfg.Switches.SetChoice(string(id), true); err != nil && !errors.Is(err, switches.ErrNoStateDir) {
		return fmt.Errorf("clearing the wall choice of %s: %w", id, err)
	}
	// Visitors meanwhile are told it is being removed, not that it runs.
	v.mu.Lock()
	in := v.run
	v.run = nil
	if in != nil {
		in.markStopping(words.OffRemoved)
	}
	v.mu.Unlock()
	if in != nil {
		in.stopAndWait()
	}
	v.setWord(words.OffRemoved)
	s.closeBridge(v)
	// Its record goes before its tokens: a vat whose record stays keeps
	// every token (a removal cut short never leaves it open to all).
	// Tokens left by a removal cut short after it are forgotten by the
	// next install under the id (forgetLeftTokens).
	if err := s.cfg.Store.DeleteRecord(id); err != nil {
		return fmt.Errorf("removing the record of %s: %w", id, err)
	}
	// Its folders are dealt with before the id is free again (an install
	// under the same id waits for this vat's op lock until forget).
	var ferr error
	if err := s.tokens.Forget(string(id)); err != nil {
		ferr = fmt.Errorf("%w (the next install of %s forgets them)", err, id)
	}
	if purge {
		// Its file system first (unmounted, its image removed): then the
		// folder it was mounted on goes with the rest.
		if err := s.cfg.Disks.Remove(string(id), s.cfg.Store.DataDir(id)); err != nil {
			ferr = errors.Join(ferr, fmt.Errorf("removing the disk of %s: %w", id, err))
		} else if err := s.cfg.Store.Purge(id); err != nil {
			ferr = errors.Join(ferr, fmt.Errorf("purging the data of %s: %w", id, err))
		}
	} else {
		if err := s.cfg.Store.Retire(id); err != nil {
			// Its uid may go to the next vat: that vat must not own this data.
			ferr = errors.Join(ferr, fmt.Errorf("keeping the data of %s: %w", id, err))
		}
		// Kept in its image, which comes back with an install of the id.
		if err := s.cfg.Disks.Unmount(s.cfg.Store.DataDir(id)); err != nil {
			ferr = errors.Join(ferr, fmt.Errorf("unmounting the data of %s: %w", id, err))
		}
	}
	s.forget(v)
	// Its record is gone, so is its code whatever became of its folders.
	s.pruneCode()
	if ferr != nil {
		return ferr
	}
	s.log.Info("vat removed", keyVat, id, "purged", purge)
	return nil
}

// purgeKept removes the data folder, disk image, runtime folder and
// tokens that id, installed no longer, left. Nothing left is ErrNoVat, as
// for any id not installed. An install of id waits meanwhile; one that
// came first is removed as any vat is.
func (s *Supervisor) purgeKept(id labels.VatID) error {
	v, err := s.lockVat(id, true)
	if err != nil {
		return err
	}
	v.mu.Lock()
	installed := v.rec.ID != "" || v.unreadable()
	v.mu.Unlock()
	if installed {
		v.op.Unlock()
		return s.Remove(id, true)
	}
	defer v.op.Unlock()
	defer s.forget(v)
	v.setWord(words.OffRemoved) // listed meanwhile as what it is
	if !s.left(id) {
		return fmt.Errorf("%w: %q", ErrNoVat, id)
	}
	err = s.cfg.Disks.Remove(string(id), s.cfg.Store.DataDir(id))
	if err == nil {
		err = s.cfg.Store.Purge(id)
	}
	if err != nil {
		return fmt.Errorf("purging the data %s left: %w", id, err)
	}
	if err := s.tokens.Forget(string(id)); err != nil {
		return fmt.Errorf("%w (the next install of %s forgets them)", err, id)
	}
	s.log.Info("vat's kept data purged", keyVat, id)
	return nil
}

// left reports whether id, not installed, left anything a purge removes.
func (s *Supervisor) left(id labels.VatID) bool {
	for _, p := range []string{s.cfg.Store.DataDir(id), s.cfg.Store.RunDir(id), s.cfg.Disks.Image(string(id))} {
		if _, err := os.Lstat(p); err == nil {
			return true
		}
	}
	return s.tokens.Has(string(id))
}

// SetLimits records the owner's limits for vat id (within the operator's)
// and restarts it under them. A disk limit its data does not fit in is
// refused (ErrBadInput): the old limits are recorded again, and it
// restarts under them.
func (s *Supervisor) SetLimits(id labels.VatID, l store.Limits) (Status, error) {
	if err := s.checkLimits(l); err != nil {
		return Status{}, err
	}
	old, err := s.saveLimits(id, l)
	if err != nil {
		return Status{}, err
	}
	s.log.Info("owner's limits", keyVat, id, "memory_mib", l.MemoryMiB, "cpus", l.CPUs, "disk_mib", l.DiskMiB)
	st, ready, err := s.restart(id)
	if err != nil || !errors.Is(ready, disk.ErrTooSmall) {
		return st, err
	}
	refused := fmt.Errorf("%w: disk_mib: %w", ErrBadInput, ready)
	if _, err := s.saveLimits(id, old); err != nil {
		return st, errors.Join(refused, err)
	}
	s.log.Warn("owner's limits refused: its data does not fit", keyVat, id, keyErr, ready)
	st, _, err = s.restart(id)
	return st, errors.Join(fmt.Errorf("%w; its limits are as they were", refused), err)
}

// saveLimits records l as vat id's own limits, and returns the ones they
// replace.
func (s *Supervisor) saveLimits(id labels.VatID, l store.Limits) (store.Limits, error) {
	v, err := s.lockVat(id, false)
	if err != nil {
		return store.Limits{}, err
	}
	defer v.op.Unlock()
	v.mu.Lock()
	rec := v.rec
	v.mu.Unlock()
	if rec.ID == "" {
		return store.Limits{}, fmt.Errorf("%w: %q", ErrNoVat, id)
	}
	old := rec.Limits
	rec.Limits = l
	if err := s.cfg.Store.SaveRecord(rec); err != nil {
		return store.Limits{}, fmt.Errorf("saving the vat record: %w", err)
	}
	v.mu.Lock()
	v.rec.Limits = l
	v.mu.Unlock()
	return old, nil
}

// SetWalled records the owner's choice for vat id and restarts it.
func (s *Supervisor) SetWalled(id labels.VatID, walled bool) (Status, error) {
	// Only for an installed vat, and under its lock, so a choice is never
	// stored ahead for an id whose code is not chosen yet, nor left behind
	// by a removal running at the same time.
	v, err := s.lockVat(id, false)
	if err != nil {
		return Status{}, err
	}
	err = s.cfg.Switches.SetChoice(string(id), walled)
	v.op.Unlock()
	if err != nil {
		return Status{}, err
	}
	s.log.Info("owner's wall choice", keyVat, id, "walled", walled)
	return s.Restart(id)
}
