package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"toybox/labels"
)

// TestDamagedRecords: a record that cannot be read is listed as damaged,
// never skipped, with the uids and code its bytes name in full and its
// good copy when that reads.
func TestDamagedRecords(t *testing.T) {
	code := "sha256:" + strings.Repeat("c", 64)
	full := `{"id":"v","code":"` + code + `","installed":"2026-01-01T00:00:00Z","uid":1000042}`
	tests := []struct {
		name      string
		bytes     string
		good      bool
		wantUIDs  []int
		wantCodes []string
	}{
		{"cut inside the uid", full[:len(full)-3], false, nil, []string{code}},
		{"cut after the uid", full[:len(full)-1] + " ", false, []int{1000042}, []string{code}},
		{"garbage", "\x00\x01garbage", false, nil, nil},
		{"empty", "", false, nil, nil},
		{"names another vat", strings.Replace(full, `"id":"v"`, `"id":"w"`, 1), false, []int{1000042}, []string{code}},
		{"cut, with its good copy", full[:20], true, []int{7}, []string{"sha256:" + strings.Repeat("a", 64)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t)
			if tt.good {
				if err := s.SaveRecord(Record{ID: "v", Code: "sha256:" + strings.Repeat("a", 64), Installed: time.Unix(1, 0).UTC(), UID: 7}); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.SaveRecord(Record{ID: "ok", Code: code}); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(s.RecordPath("v"), []byte(tt.bytes), 0o600); err != nil {
				t.Fatal(err)
			}
			recs, bad, err := s.Records()
			if err != nil || len(recs) != 1 || recs[0].ID != "ok" {
				t.Fatalf("Records = %+v, %v; want the record that reads", recs, err)
			}
			if len(bad) != 1 || bad[0].ID != "v" || bad[0].Err == nil {
				t.Fatalf("damaged = %+v; want v, with why", bad)
			}
			d := bad[0]
			if !slices.Equal(d.UIDs, tt.wantUIDs) || !slices.Equal(d.Codes, tt.wantCodes) {
				t.Errorf("uids %v codes %v; want %v %v", d.UIDs, d.Codes, tt.wantUIDs, tt.wantCodes)
			}
			if (d.Good != nil) != tt.good || tt.good && d.Good.UID != 7 {
				t.Errorf("good copy %+v; want one: %v", d.Good, tt.good)
			}
			if o, err := s.Orphans(); err != nil || len(o) != 0 {
				t.Errorf("Orphans = %v, %v; a damaged record is no orphan", o, err)
			}
			if err := s.DeleteRecord("v"); err != nil {
				t.Fatal(err)
			}
			if _, bad, _ := s.Records(); len(bad) != 0 {
				t.Errorf("damaged after DeleteRecord: %+v", bad)
			}
			if _, err := os.Stat(s.RecordPath("v") + goodSuffix); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the good copy after DeleteRecord: %v", err)
			}
		})
	}
}

// TestRecordsRefuseBadFileName: a record's file name is where a vat id
// enters from disk. A name that is no vat id is refused with the one
// message labels.ParseVatID gives, the other records still load, and a
// folder so named is no orphan.
func TestRecordsRefuseBadFileName(t *testing.T) {
	s := openStore(t)
	if err := s.SaveRecord(Record{ID: "ok", Code: "sha256:" + strings.Repeat("c", 64)}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"Bad", "a.b", "-x"} {
		if err := os.WriteFile(filepath.Join(s.StateDir(), "vats", name+".json"), []byte(`{"id":"`+name+`"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(s.StateDir(), "data", name), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	recs, bad, err := s.Records()
	if len(recs) != 1 || recs[0].ID != "ok" || len(bad) != 0 {
		t.Errorf("Records = %+v, damaged %+v; want only ok", recs, bad)
	}
	for _, name := range []string{"Bad", "a.b", "-x"} {
		_, perr := labels.ParseVatID(name)
		want := "reading " + name + ".json: " + ErrBadID.Error() + ": " + perr.Error()
		if !errors.Is(err, ErrBadID) || !strings.Contains(err.Error(), want) {
			t.Errorf("Records error = %v; want ErrBadID and %q", err, want)
		}
	}
	for _, name := range []string{"Bad", "a.b", "-x"} {
		if err := os.Remove(filepath.Join(s.StateDir(), "vats", name+".json")); err != nil {
			t.Fatal(err)
		}
	}
	if o, err := s.Orphans(); err != nil || len(o) != 0 {
		t.Errorf("Orphans = %v, %v; a folder named no vat id is no vat's", o, err)
	}
}

// TestForgedIDActsOnNothing: a labels.VatID made by a conversion, not by
// ParseVatID, is refused by each method that writes, removes or chowns a
// path built from it. "../x" would act on the state folder itself.
func TestForgedIDActsOnNothing(t *testing.T) {
	s := openStore(t)
	victim := filepath.Join(s.StateDir(), "x")
	if err := os.Mkdir(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	forged := labels.VatID("../x")
	for name, f := range map[string]func() error{
		"SaveRecord":   func() error { return s.SaveRecord(Record{ID: forged}) },
		"DeleteRecord": func() error { return s.DeleteRecord(forged) },
		"PrepareDirs":  func() error { return s.PrepareDirs(forged, -1, -1) },
		"Retire":       func() error { return s.Retire(forged) },
		"Purge":        func() error { return s.Purge(forged) },
	} {
		if err := f(); !errors.Is(err, ErrBadID) || !strings.Contains(err.Error(), `"../x" is not a vat id`) {
			t.Errorf("%s(%q) = %v; want ErrBadID with the one message", name, forged, err)
		}
	}
	if _, err := os.Stat(filepath.Join(victim, "keep")); err != nil {
		t.Errorf("%s after the forged calls: %v", victim, err)
	}
	if _, err := os.Stat(filepath.Join(s.StateDir(), "x.json")); err == nil {
		t.Error("SaveRecord wrote <state>/x.json for a forged id")
	}
}
