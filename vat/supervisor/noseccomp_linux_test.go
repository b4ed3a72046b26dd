package supervisor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"toybox/vat/wall"
)

// TestNoSeccompTableRunsWalledNoSeccomp: where the architecture has no
// seccomp filter table, a walled vat is started walled-noseccomp
// (Spec.NoSeccomp, the one case the wall allows it), not refused for a
// setting nothing outside the wall package can make. Where there is a
// table, NoSeccomp stays false: a wall is never weakened (a build without
// cgo keeps its vats off, saying why).
func TestNoSeccompTableRunsWalledNoSeccomp(t *testing.T) {
	for _, noTable := range []bool{false, true} {
		t.Run(fmt.Sprintf("no table %v", noTable), func(t *testing.T) {
			old := noSeccompTable
			noSeccompTable = func() bool { return noTable }
			t.Cleanup(func() { noSeccompTable = old })
			specs := make(chan wall.Spec, 16)
			s, st := noWallSupervisor(t, func(spec wall.Spec) {
				select {
				case specs <- spec:
				default:
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
