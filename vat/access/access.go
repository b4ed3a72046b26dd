// Package access keeps each vat's bearer tokens.
//
// Tokens are minted for their vat's owner, kept only as hashes, checked on every MCP request,
// revoked one at a time.
//
// A token reads tbx_<id>_<secret>. The id (12 hex digits) names it in the
// admin API, the logs and the vat's principal; the secret is 32 random
// bytes. The file keeps, per vat, each token's id and the SHA-256 of the
// vat's id and the whole token, so a token is good for its own vat only,
// and a stolen file opens nothing. It also keeps each token's secrets (the
// environment of its processes alone), which a copy of it shows.
package access

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"toybox/vat/atomicfile"
)

// Errors.
var (
	// ErrNoToken: no token of that vat has that id.
	ErrNoToken = errors.New("no such token")
	// ErrTooMany: the vat holds MaxPerVat tokens already.
	ErrTooMany = errors.New("too many tokens")
	// ErrBadFile: the tokens file cannot be read as one.
	ErrBadFile = errors.New("bad tokens file")
	// ErrNotStored: a revocation took effect, but the tokens file could
	// not be rewritten to hold it (a full disk, an I/O error).
	ErrNotStored = errors.New("revocation not stored")
)

// MaxPerVat bounds one vat's tokens: each is checked in one map lookup,
// but the admin API lists them all, and the file holds them all.
const MaxPerVat = 256

// retryEvery is how often a revocation not stored is written again: a
// full disk may get room at any time, and a restart before then would
// bring the token back. A variable for the tests.
var retryEvery = 10 * time.Second

const (
	prefix    = "tbx_"
	idBytes   = 6  // 12 hex digits: a name, not a secret
	keyBytes  = 32 // the secret
	hashLabel = "toybox-token\x00"
)

// Info is what is kept of a token: never the token.
type Info struct {
	// ID names the token (DELETE /<vat>/tokens/<id>).
	ID string `json:"id"`
	// Created is when it was minted.
	Created time.Time `json:"created"`
	// Env names the variables set for this token's processes alone (its
	// secrets); their values are never shown.
	Env []string `json:"env,omitempty"`
}

type entry struct {
	Info
	Hash string `json:"sha256"` // hex SHA-256 of hashLabel, the vat's id, NUL, the token
	// Secrets are the token's own environment (R22): set only in the
	// processes that serve it.
	Secrets map[string]string `json:"secrets,omitempty"`
}

// Store is the tokens of every vat, in one file (mode 0600). Safe for
// concurrent use.
//
// A revocation takes effect at once, in memory, even when the file cannot
// be rewritten: the token opens nothing from then on. Until the file holds
// it (Unstored), it is written again every retryEvery, at every other
// change of tokens, and at Close; a restart before then would bring the
// token back.
type Store struct {
	path string
	mu   sync.RWMutex
	vats map[string][]entry
	// unstored are, per vat, the tokens revoked in memory that the file
	// still holds.
	unstored map[string][]Info
	retry    *time.Timer // writes unstored again; nil when none waits
	closed   bool
}

// Open reads the tokens at path; a missing file holds none.
func Open(path string) (*Store, error) {
	s := &Store{path: path, vats: map[string][]entry{}, unstored: map[string][]Info{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the tokens: %w", err)
	}
	if err := json.Unmarshal(b, &s.vats); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadFile, path, err)
	}
	for vat, es := range s.vats {
		for _, e := range es {
			if !validID(e.ID) || len(e.Hash) != 2*sha256.Size {
				return nil, fmt.Errorf("%w: %s: vat %s holds a token without an id or a hash", ErrBadFile, path, vat)
			}
		}
	}
	return s, nil
}

func validID(id string) bool {
	if len(id) != 2*idBytes {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil && strings.ToLower(id) == id
}

func hashOf(vat, token string) string {
	h := sha256.New()
	h.Write([]byte(hashLabel))
	h.Write([]byte(vat))
	h.Write([]byte{0})
	h.Write([]byte(token))
	return hex.EncodeToString(h.Sum(nil))
}

// save writes every vat's tokens (s.mu held). The file then holds every
// revocation made so far.
func (s *Store) save() error {
	b, err := json.MarshalIndent(s.vats, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(s.path, append(b, '\n'), 0o600); err != nil {
		return err
	}
	clear(s.unstored)
	if s.retry != nil {
		s.retry.Stop()
		s.retry = nil
	}
	return nil
}

// notStored keeps info, revoked in memory, as not stored, arms the retry,
// and says so (s.mu held).
func (s *Store) notStored(vat string, info Info, err error) error {
	if !slices.ContainsFunc(s.unstored[vat], func(i Info) bool { return i.ID == info.ID }) {
		s.unstored[vat] = append(s.unstored[vat], info)
	}
	if s.retry == nil && !s.closed {
		s.retry = time.AfterFunc(retryEvery, s.retrySave)
	}
	return fmt.Errorf("%w: token %s of vat %s opens nothing from now on, but the tokens file could not be rewritten (%w): a restart before it is would open it again; toybox writes it again every %s (free space, or DELETE it again)", ErrNotStored, info.ID, vat, err, retryEvery)
}

// retrySave writes the revocations not stored again.
func (s *Store) retrySave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retry = nil
	if len(s.unstored) == 0 || s.closed {
		return
	}
	if s.save() != nil {
		s.retry = time.AfterFunc(retryEvery, s.retrySave)
	}
}

// Unstored returns the ids of vat's tokens revoked in memory that the
// tokens file still holds: a restart now would open them again.
func (s *Store) Unstored(vat string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var ids []string
	for _, i := range s.unstored[vat] {
		ids = append(ids, i.ID)
	}
	return ids
}

// Close stops the retry, writing the revocations not stored a last time.
// An error names those a restart will open again.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.retry != nil {
		s.retry.Stop()
		s.retry = nil
	}
	if len(s.unstored) == 0 {
		return nil
	}
	err := s.save()
	if err == nil {
		return nil
	}
	var lost []string
	for _, vat := range slices.Sorted(maps.Keys(s.unstored)) {
		for _, i := range s.unstored[vat] {
			lost = append(lost, vat+"/"+i.ID)
		}
	}
	return fmt.Errorf("%w: the tokens file still holds revoked tokens %s, which open their vats again at the next start (%w)", ErrNotStored, strings.Join(lost, ", "), err)
}

// Mint makes a token for vat and keeps its hash, with the environment
// only its processes get (nil: none). The token is returned once; nothing
// can show it again.
func (s *Store) Mint(vat string, secrets map[string]string) (string, Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	es := s.vats[vat]
	if len(es) >= MaxPerVat {
		return "", Info{}, fmt.Errorf("%w: vat %s holds %d (revoke one first)", ErrTooMany, vat, MaxPerVat)
	}
	var id string
	for {
		b := make([]byte, idBytes)
		_, _ = rand.Read(b) // never fails (crypto/rand)
		id = hex.EncodeToString(b)
		if !slices.ContainsFunc(es, func(e entry) bool { return e.ID == id }) {
			break
		}
	}
	key := make([]byte, keyBytes)
	_, _ = rand.Read(key)
	token := prefix + id + "_" + base64.RawURLEncoding.EncodeToString(key)
	info := Info{ID: id, Created: time.Now().UTC().Truncate(time.Second)}
	if len(secrets) > 0 {
		info.Env = slices.Sorted(maps.Keys(secrets))
		secrets = maps.Clone(secrets)
	} else {
		secrets = nil
	}
	s.vats[vat] = append(slices.Clone(es), entry{Info: info, Hash: hashOf(vat, token), Secrets: secrets})
	if err := s.save(); err != nil {
		s.vats[vat] = es
		if len(es) == 0 {
			delete(s.vats, vat)
		}
		return "", Info{}, fmt.Errorf("keeping the token: %w", err)
	}
	return token, info, nil
}

// idOf returns the id a token (or a token's start, or a bare id) names.
func idOf(s string) string {
	s = strings.TrimPrefix(s, prefix)
	if len(s) >= 2*idBytes && (len(s) == 2*idBytes || s[2*idBytes] == '_') {
		return s[:2*idBytes]
	}
	return ""
}

// Revoke removes vat's token named by ref: its id, or the token itself.
// The token opens nothing from then on. Where the file cannot be
// rewritten to hold it, the error is ErrNotStored (with the token's
// Info); revoking it again writes the file again.
func (s *Store) Revoke(vat, ref string) (Info, error) {
	id := idOf(ref)
	s.mu.Lock()
	defer s.mu.Unlock()
	es := s.vats[vat]
	i := slices.IndexFunc(es, func(e entry) bool { return id != "" && e.ID == id })
	if i < 0 {
		if j := slices.IndexFunc(s.unstored[vat], func(i Info) bool { return id != "" && i.ID == id }); j >= 0 {
			info := s.unstored[vat][j]
			if err := s.save(); err != nil {
				return info, s.notStored(vat, info, err)
			}
			return info, nil
		}
		return Info{}, fmt.Errorf("%w: vat %s has no token %q", ErrNoToken, vat, ref)
	}
	info := es[i].Info
	rest := slices.Delete(slices.Clone(es), i, i+1)
	if len(rest) == 0 {
		delete(s.vats, vat)
	} else {
		s.vats[vat] = rest
	}
	if err := s.save(); err != nil {
		return info, s.notStored(vat, info, err)
	}
	return info, nil
}

// Forget removes every token of vat (it was removed: a vat installed later
// under the same id opens to none of them).
func (s *Store) Forget(vat string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	es, ok := s.vats[vat]
	if !ok && len(s.unstored[vat]) == 0 {
		return nil
	}
	delete(s.vats, vat)
	if err := s.save(); err != nil {
		if ok {
			s.vats[vat] = es
		}
		return fmt.Errorf("forgetting the tokens of %s: %w", vat, err)
	}
	return nil
}

// Has reports whether vat holds any token (then every MCP request to it
// needs one).
func (s *Store) Has(vat string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.vats[vat]) > 0
}

// Check returns the id of vat's token equal to token, or false. A token of
// another vat is false.
func (s *Store) Check(vat, token string) (string, bool) {
	id := idOf(token)
	if id == "" || len(token) > 128 {
		return "", false
	}
	want := hashOf(vat, token)
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, e := range s.vats[vat] {
		if e.ID == id && subtle.ConstantTimeCompare([]byte(e.Hash), []byte(want)) == 1 {
			return id, true
		}
	}
	return "", false
}

// Secrets returns the environment of vat's token id, nil when it has
// none. The caller must not change it.
func (s *Store) Secrets(vat, id string) map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, e := range s.vats[vat] {
		if e.ID == id {
			return e.Secrets
		}
	}
	return nil
}

// List returns what is kept of vat's tokens, oldest first.
func (s *Store) List(vat string) []Info {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Info, 0, len(s.vats[vat]))
	for _, e := range s.vats[vat] {
		out = append(out, e.Info)
	}
	return out
}
