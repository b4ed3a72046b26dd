package main

import (
	"strings"
	"testing"

	"toybox/vat/wall/entry"
)

func TestForwardFlag(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want entry.Forward
		ok   bool
	}{
		{"ipv4", "5432=127.0.0.1:5432", entry.Forward{Port: 5432, Host: "127.0.0.1", TargetPort: 5432}, true},
		{"name", "8080=db.lan:80", entry.Forward{Port: 8080, Host: "db.lan", TargetPort: 80}, true},
		{"ipv6", "9000=[::1]:9001", entry.Forward{Port: 9000, Host: "::1", TargetPort: 9001}, true},
		{"no equals", "5432", entry.Forward{}, false},
		{"port zero", "0=127.0.0.1:1", entry.Forward{}, false},
		{"target port zero", "1=127.0.0.1:0", entry.Forward{}, false},
		{"port too big", "70000=127.0.0.1:1", entry.Forward{}, false},
		{"no host", "1=:2", entry.Forward{}, false},
		{"no target port", "1=127.0.0.1", entry.Forward{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f forwards
			err := f.Set(tt.in)
			if (err == nil) != tt.ok {
				t.Fatalf("Set(%q) = %v; want ok=%v", tt.in, err, tt.ok)
			}
			if tt.ok && (len(f) != 1 || f[0] != tt.want) {
				t.Errorf("Set(%q) = %+v; want %+v", tt.in, f, tt.want)
			}
		})
	}
}

func FuzzForwardFlag(f *testing.F) {
	for _, s := range []string{"5432=127.0.0.1:5432", "9000=[::1]:9001", "1=a:2", "=", "0=x:0", "65535=h:65535"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var fw forwards
		if err := fw.Set(s); err != nil {
			return
		}
		got := fw[0]
		if got.Port == 0 || got.TargetPort == 0 || got.Host == "" {
			t.Fatalf("Set(%q) accepted %+v", s, got)
		}
		if strings.ContainsAny(got.Host, "\x00") {
			t.Fatalf("Set(%q) accepted a host with NUL", s)
		}
	})
}
