package supervisor

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"toybox/vat/wall"
)

// TestManifestInotifyReachesTheWall: a wall refuses inotify unless the
// vat's manifest asks for it (sandbox.inotify); the ask reaches the wall's
// Spec, and nothing else turns it on.
func TestManifestInotifyReachesTheWall(t *testing.T) {
	for _, ask := range []bool{false, true} {
		t.Run(fmt.Sprintf("asks %v", ask), func(t *testing.T) {
			specs := make(chan wall.Spec, 16)
			s, _ := noWallSupervisor(t, func(spec wall.Spec) {
				select {
				case specs <- spec:
				default:
				}
			})
			b := tarBundle(t, map[string]string{
				"manifest.json": fmt.Sprintf(`{"command":["./app"],"sandbox":{"inotify":%v}}`, ask),
				"app":           "#!/bin/sh\nexit 0\n",
			})
			rec := httptest.NewRecorder()
			s.AdminHandler().ServeHTTP(rec, httptest.NewRequest("PUT", "http://toybox/watcher", b))
			select {
			case spec := <-specs:
				if spec.Inotify != ask {
					t.Errorf("Spec.Inotify = %v; want %v", spec.Inotify, ask)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the supervisor never launched the wall (PUT: %d %s)", rec.Code, rec.Body)
			}
		})
	}
}
