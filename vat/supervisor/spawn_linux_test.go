package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
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

// TestNoSeccompTableRunsWalledNoSeccomp: where the architecture has no
// seccomp filter table, a walled vat is started walled-noseccomp
// (Spec.NoSeccomp, the one case the wall allows it), not refused for a
// setting nothing outside the wall package can make. Where there is a
// table, NoSeccomp stays false: a wall is never weakened (a build without
// cgo keeps its vats off, saying why).
func TestNoSeccompTableRunsWalledNoSeccomp(t *testing.T) {
	for _, noTable := range []bool{false, true} {
		t.Run(fmt.Sprintf("no table %v", noTable), func(t *testing.T) {
			specs := make(chan wall.Spec, 16)
			s, st := testSupervisorWith(t, func(c *Config) {
				c.NoSeccompTable = func() bool { return noTable }
				c.Launch = func(_ context.Context, spec wall.Spec, _ *slog.Logger) (Process, error) {
					select {
					case specs <- spec:
					default:
					}
					return nil, errors.New("no wall in this test")
				}
			})
			code, err := st.Put(strings.NewReader("#!/bin/sh\nexit 0\n"), "", nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _, _ = s.Install(InstallRequest{ID: "tier", Code: code})
			select {
			case spec := <-specs:
				if spec.NoSeccomp != noTable {
					t.Errorf("Spec.NoSeccomp = %v; want %v", spec.NoSeccomp, noTable)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the supervisor never launched the wall")
			}
		})
	}
}
