package wall

import (
	"strings"
	"testing"
)

func TestWallRunsApp(t *testing.T) {
	f := newFixture(t, "hello")
	out, err := f.runVictim(t, "hello")
	if err != nil {
		t.Fatalf("Wait = %v; output:\n%s", err, out)
	}
	if !strings.Contains(out, "hello from inside") {
		t.Errorf("output = %q; want the app's greeting", out)
	}
}
