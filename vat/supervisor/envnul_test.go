package supervisor

import (
	"archive/tar"
	"bytes"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"toybox/vat/wall"
)

// TestAdminRefusesNULInEnv: an env value holding a NUL byte can reach no
// process. It was accepted: a new vat was recorded with it and stayed off
// ("the value of FOO holds a NUL byte", from the wall), and an upgrade
// stopped the running version, failed, and started it again. It is bad
// input: 400 naming it, nothing recorded, nothing launched.
func TestAdminRefusesNULInEnv(t *testing.T) {
	var launches atomic.Int32
	s, st := noWallSupervisor(t, func(wall.Spec) { launches.Add(1) })
	b := tarBundle(t, map[string]string{
		"manifest.json": `{"command":["./app"],"env":["FOO"]}`,
		"app":           "#!/bin/sh\nexit 0\n",
	})
	target := "http://toybox/nul?env=" + url.QueryEscape(`{"FOO":"a\u0000b"}`)
	rec := httptest.NewRecorder()
	s.AdminHandler().ServeHTTP(rec, httptest.NewRequest("PUT", target, b))
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), "NUL") {
		t.Errorf("PUT with a NUL in an env value = %d %s; want 400 naming the NUL", rec.Code, rec.Body)
	}
	if recs, _, err := st.Records(); err != nil || len(recs) != 0 {
		t.Errorf("records = %v, %v; want none", recs, err)
	}
	if n := launches.Load(); n != 0 {
		t.Errorf("%d launches; want none", n)
	}
}

// tarBundle is a bundle of files (name: content, each mode 0755).
func tarBundle(t *testing.T, files map[string]string) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}
