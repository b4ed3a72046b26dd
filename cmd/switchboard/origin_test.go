package main

import (
	"fmt"
	"strings"
	"testing"

	"toybox/tests/testenv"
)

// TestOriginReachesOwnerCheck: a service of toybox's user, outside toybox's
// tree, is reachable by a vat's handle only for an address its owner typed;
// the same address in a grant its manifest wrote (origin "manifest") is
// refused by the listener-owner check.
func TestOriginReachesOwnerCheck(t *testing.T) {
	testenv.RequireRoot(t)
	const toyboxUID = 65534
	port := testenv.ListenAs(t, toyboxUID) // a service of toybox's user, outside its tree

	r := startSwitchboard(t, map[string]any{"owner": map[string]any{
		"toyboxUID":  toyboxUID,
		"ownRoots":   []string{t.TempDir()},
		"dockerHost": "unix:///nonexistent/docker.sock",
	}})
	target := fmt.Sprintf("127.0.0.1:%d", port)
	tests := []struct {
		name       string
		constrain  []string
		wantCode   int
		wantReason string
	}{
		{"typed by the owner", []string{`{"vat":"alice"}`}, 0, ""},
		{"written by the manifest", []string{`{"vat":"alice","origin":"manifest"}`}, 3, "never a manifest default"},
		{"a vat cannot shed origin", []string{`{"vat":"alice","origin":"manifest"}`, `{"host":"127.0.0.1"}`}, 3, "never a manifest default"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var args []string
			for _, c := range tt.constrain {
				args = append(args, "--constrain", c)
			}
			args = append([]string{"--socket", r.local}, append(args, "check", target)...)
			code, out, errs := egress(t, "", args...)
			refusedRight := tt.wantCode == 0 || strings.HasPrefix(errs, "egress refused: ") && strings.Contains(errs, tt.wantReason)
			if code != tt.wantCode || !refusedRight {
				t.Fatalf("check %s with %v: exit %d, stdout %q, stderr %q; want exit %d", target, tt.constrain, code, out, errs, tt.wantCode)
			}
			t.Logf("%s: %s%s", tt.name, strings.TrimSpace(out), strings.TrimSpace(errs))
		})
	}
}
