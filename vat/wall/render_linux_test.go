package wall

import (
	"os"
	"slices"
	"testing"
)

// TestNestedUserNamespacesRefusedOnce: a wall refuses its app user
// namespaces of its own with one mechanism: the seccomp filter where there
// is one (TestAttackSyscalls tries unshare and clone with CLONE_NEWUSER in
// a real wall), bubblewrap's --disable-userns where there is none
// (walled-noseccomp, which this architecture never runs, so it is checked
// here on the options).
func TestNestedUserNamespacesRefusedOnce(t *testing.T) {
	for _, filtered := range []bool{true, false} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		plan := &Plan{ID: "userns", NoNet: true, Seccomp: filtered, Chdir: "/", Command: []string{"/bin/true"}}
		var fds fdTable
		opts, _, err := plan.render(&fds, Spec{AppCap: w}, &viewHold{})
		fds.closeAll()
		_ = r.Close()
		_ = w.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Contains(opts, "--disable-userns"); got == filtered {
			t.Errorf("seccomp %v: --disable-userns in bwrap's options = %v; want %v", filtered, got, !filtered)
		}
	}
}
