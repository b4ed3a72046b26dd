package procstatus

import (
	"os"
	"strconv"
	"testing"
)

const sample = "Name:\tsleep\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nPid:\t4243\nUid:\t1000\t1001\t1002\t1003\nSigCgt:\t0000000000004002\nVmRSS:\t    1234 kB\nnot a field\nTgid:\t1\n"

func TestParse(t *testing.T) {
	s := Parse([]byte(sample))
	tests := []struct {
		key, want string
	}{
		{"Name", "sleep"},
		{"State", "S (sleeping)"},
		{"Tgid", "4242"}, // the first of two
		{"SigCgt", "0000000000004002"},
		{"VmRSS", "1234 kB"},
		{"Missing", ""},
	}
	for _, tt := range tests {
		if got := s[tt.key]; got != tt.want {
			t.Errorf("Parse(sample)[%q] = %q; want %q", tt.key, got, tt.want)
		}
	}
	if n, ok := s.Int("Pid"); !ok || n != 4243 {
		t.Errorf("Int(Pid) = %d, %v; want 4243, true", n, ok)
	}
	if _, ok := s.Int("State"); ok {
		t.Error("Int(State) ok; want not a number")
	}
	if f := s.Fields("Uid"); len(f) != 4 || f[1] != "1001" {
		t.Errorf("Fields(Uid) = %q; want 4 fields, effective 1001", f)
	}
}

// TestRead reads this process's status twice, as itself and by its pid.
func TestRead(t *testing.T) {
	for _, read := range []func() (Status, error){Self, func() (Status, error) { return Read(os.Getpid()) }} {
		s, err := read()
		pid := os.Getpid()
		if err != nil {
			t.Fatalf("Read(%d): %v", pid, err)
		}
		if got := s["Tgid"]; got != strconv.Itoa(os.Getpid()) {
			t.Errorf("Read(%d)[Tgid] = %q; want %d", pid, got, os.Getpid())
		}
		if f := s.Fields("Uid"); len(f) != 4 || f[0] != strconv.Itoa(os.Getuid()) {
			t.Errorf("Read(%d)[Uid] = %q; want real uid %d first", pid, s["Uid"], os.Getuid())
		}
	}
	for _, pid := range []int{0, -1, 1 << 30} {
		if _, err := Read(pid); err == nil {
			t.Errorf("Read(%d) succeeded; want an error (no such process)", pid)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(sample))
	f.Fuzz(func(t *testing.T, b []byte) {
		for k, v := range Parse(b) {
			if v != "" && (v[0] == ' ' || v[0] == '\t') {
				t.Errorf("field %q = %q: untrimmed", k, v)
			}
		}
	})
}
