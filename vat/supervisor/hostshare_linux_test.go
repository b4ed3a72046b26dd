package supervisor

import (
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"toybox/vat/switches"
	"toybox/vat/wall"
)

// TestShareEnvIsNoFileGrant: a credential set the operator's table shares
// with a vat is environment, never a bind. A manifest that names one of
// its keys in sandbox.files gets no folder bound from the operator's
// value: files are the owner's values only.
func TestShareEnvIsNoFileGrant(t *testing.T) {
	tab, err := switches.ParseTable([]byte(`{"shares": [{"name": "Crow's home", "env": {"CROW_HOME": "/srv/crow", "OTHER": "/srv/other"}, "vats": ["media"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	specs := make(chan wall.Spec, 16)
	s, _ := noWallSupervisor(t, func(spec wall.Spec) {
		select {
		case specs <- spec:
		default:
		}
	})
	sw, err := switches.New(switches.Config{StateDir: s.cfg.Store.StateDir(), Table: tab})
	if err != nil {
		t.Fatal(err)
	}
	s.cfg.Switches = sw
	b := tarBundle(t, map[string]string{
		"manifest.json": `{"command":["./app"],"env":["CROW_HOME","OTHER"],"sandbox":{"files":{"read":["OTHER"],"write":["CROW_HOME"],"oauthDir":["CROW_HOME"]}}}`,
		"app":           "#!/bin/sh\nexit 0\n",
	})
	rec := httptest.NewRecorder()
	s.AdminHandler().ServeHTTP(rec, httptest.NewRequest("PUT", "http://toybox/media", b))
	select {
	case spec := <-specs:
		if spec.Env["CROW_HOME"] != "/srv/crow" {
			t.Errorf("Spec.Env[CROW_HOME] = %q; want the operator's value", spec.Env["CROW_HOME"])
		}
		all := slices.Concat(spec.Files.Read, spec.Files.Write, spec.Files.OAuthDir)
		if len(all) != 0 {
			t.Errorf("Spec.Files = %+v; want none: the manifest turned the operator's credentials into binds", spec.Files)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the supervisor never launched the wall (PUT: %d %s)", rec.Code, rec.Body)
	}
}
