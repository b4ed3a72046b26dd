package access

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func open(t *testing.T) (*Store, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens.json")
	s, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	return s, p
}

func mint(t *testing.T, s *Store, vat string) (string, Info) {
	t.Helper()
	tok, info, err := s.Mint(vat, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tok, info
}

func TestMintCheck(t *testing.T) {
	s, _ := open(t)
	if s.Has("alice") {
		t.Fatal("a new store says alice has a token")
	}
	tok, info := mint(t, s, "alice")
	if !strings.HasPrefix(tok, "tbx_"+info.ID+"_") || len(tok) < 40 {
		t.Fatalf("token %q does not read tbx_<id>_<secret> with id %s", tok, info.ID)
	}
	if !s.Has("alice") {
		t.Error("alice has no token after Mint")
	}
	tests := []struct {
		name, vat, token string
		ok               bool
	}{
		{"its own vat", "alice", tok, true},
		{"another vat", "bob", tok, false},
		{"a vat whose name starts the same", "alice2", tok, false},
		{"the id alone", "alice", info.ID, false},
		{"tbx_ and the id", "alice", "tbx_" + info.ID, false},
		{"one letter changed", "alice", tok[:len(tok)-1] + flip(tok[len(tok)-1]), false},
		{"cut short", "alice", tok[:len(tok)-2], false},
		{"longer", "alice", tok + "x", false},
		{"empty", "alice", "", false},
		{"huge", "alice", tok + strings.Repeat("x", 1<<16), false},
	}
	for _, tt := range tests {
		id, ok := s.Check(tt.vat, tt.token)
		if ok != tt.ok || (ok && id != info.ID) {
			t.Errorf("%s: Check(%s, …) = %q, %v; want %v", tt.name, tt.vat, id, ok, tt.ok)
		}
	}
}

func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

// TestKeptAsHashes: the file holds each token's id and a hash, never the
// token or its secret, and only its owner can read it.
func TestKeptAsHashes(t *testing.T) {
	s, p := open(t)
	tok, _ := mint(t, s, "alice")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	secret := tok[strings.LastIndexByte(tok, '_')+1:]
	if strings.Contains(string(b), secret) {
		t.Errorf("the tokens file holds the token's secret:\n%s", b)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("tokens file mode %v; want 0600", fi.Mode().Perm())
	}
}

// TestSurvivesReopen: tokens minted and revoked are so after a restart.
func TestSurvivesReopen(t *testing.T) {
	s, p := open(t)
	keep, _ := mint(t, s, "alice")
	gone, goneInfo := mint(t, s, "alice")
	bobs, _ := mint(t, s, "bob")
	if _, err := s.Revoke("alice", goneInfo.ID); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s2.Check("alice", keep); !ok {
		t.Error("a kept token fails after reopening")
	}
	if _, ok := s2.Check("alice", gone); ok {
		t.Error("a revoked token works after reopening")
	}
	if _, ok := s2.Check("bob", bobs); !ok {
		t.Error("bob's token fails after reopening")
	}
	if got := len(s2.List("alice")); got != 1 {
		t.Errorf("alice lists %d tokens; want 1", got)
	}
}

func TestRevoke(t *testing.T) {
	s, _ := open(t)
	a1, i1 := mint(t, s, "alice")
	a2, i2 := mint(t, s, "alice")
	b1, i3 := mint(t, s, "bob")
	if _, err := s.Revoke("bob", i1.ID); !errors.Is(err, ErrNoToken) {
		t.Errorf("bob revoking alice's token: err = %v; want ErrNoToken", err)
	}
	if _, err := s.Revoke("alice", "nothing"); !errors.Is(err, ErrNoToken) {
		t.Errorf("Revoke(nothing) err = %v; want ErrNoToken", err)
	}
	if _, err := s.Revoke("alice", ""); !errors.Is(err, ErrNoToken) {
		t.Errorf("Revoke(\"\") err = %v; want ErrNoToken", err)
	}
	// By the token itself (pasted whole) as well as by its id.
	if info, err := s.Revoke("alice", a1); err != nil || info.ID != i1.ID {
		t.Fatalf("Revoke(the token) = %+v, %v; want %s", info, err, i1.ID)
	}
	if _, ok := s.Check("alice", a1); ok {
		t.Error("a revoked token still works")
	}
	if _, ok := s.Check("alice", a2); !ok {
		t.Error("revoking one token revoked another")
	}
	if _, err := s.Revoke("alice", "tbx_"+i2.ID); err != nil {
		t.Fatal(err)
	}
	if s.Has("alice") {
		t.Error("alice has tokens after both were revoked: she is not open again")
	}
	if _, ok := s.Check("bob", b1); !ok || i3.ID == "" {
		t.Error("bob's token went with alice's")
	}
}

// TestForget: a removed vat's tokens do not open a vat installed later
// under its id.
func TestForget(t *testing.T) {
	s, p := open(t)
	tok, _ := mint(t, s, "alice")
	if err := s.Forget("alice"); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s2.Check("alice", tok); ok || s2.Has("alice") {
		t.Error("a forgotten vat's token still works")
	}
}

func TestMaxPerVat(t *testing.T) {
	s, _ := open(t)
	for range MaxPerVat {
		mint(t, s, "alice")
	}
	if _, _, err := s.Mint("alice", nil); !errors.Is(err, ErrTooMany) {
		t.Errorf("Mint past the limit: err = %v; want ErrTooMany", err)
	}
	if _, _, err := s.Mint("bob", nil); err != nil {
		t.Errorf("bob's first token: %v", err)
	}
}

// TestSaveFailureKeepsNothing: a token that could not be kept is not
// handed out, one whose revocation could not be stored opens nothing all
// the same (TestRevokeOnFullDisk), and tokens that could not be forgotten
// are kept.
func TestSaveFailureKeepsNothing(t *testing.T) {
	s, _ := open(t)
	tok, info := mint(t, s, "alice")
	other, _ := mint(t, s, "alice")
	// A folder that is a file: no temporary file can be made there, even
	// as root.
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s.path = filepath.Join(notDir, "tokens.json")
	if _, _, err := s.Mint("bob", nil); err == nil {
		t.Error("Mint into an unwritable folder succeeded")
	}
	if s.Has("bob") {
		t.Error("a token that was not kept counts")
	}
	if _, err := s.Revoke("alice", info.ID); !errors.Is(err, ErrNotStored) {
		t.Errorf("Revoke into an unwritable folder = %v; want ErrNotStored", err)
	}
	if _, ok := s.Check("alice", tok); ok {
		t.Error("a token whose revocation was not stored still works")
	}
	if err := s.Forget("alice"); err == nil || !s.Has("alice") {
		t.Errorf("Forget into an unwritable folder = %v, and alice has tokens = %v; want an error and her tokens kept", err, s.Has("alice"))
	}
	if _, ok := s.Check("alice", other); !ok {
		t.Error("a token that could not be forgotten no longer works")
	}
	if err := s.Close(); !errors.Is(err, ErrNotStored) || !strings.Contains(err.Error(), "alice/"+info.ID) {
		t.Errorf("Close with a revocation not stored = %v; want ErrNotStored naming alice/%s", err, info.ID)
	}
}

func TestOpenBadFile(t *testing.T) {
	for _, body := range []string{`{`, `{"alice":[{"id":"x","sha256":"y"}]}`, `[]`} {
		p := filepath.Join(t.TempDir(), "tokens.json")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(p); !errors.Is(err, ErrBadFile) {
			t.Errorf("Open(%s) err = %v; want ErrBadFile", body, err)
		}
	}
}
