package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"toybox/tests/testenv"
)

// TestDiskRoomCheck: the vats' disk images are sparse, so their limits
// may add up to more than the state file system holds, and nothing told
// the operator. doctor counts them (an owner's own limit, else
// --wall-disk-mib; less what each image has written) and the prepare
// folders of --installs installs against the file system's free room.
// The same two vats are counted on an 8 GiB file system, where they fit,
// and on a 2 GiB one, where doctor warns with the numbers and the
// settings to change.
func TestDiskRoomCheck(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tt := range []struct {
		size     string
		sizeMiB  int
		warn     bool
		shortMiB string
	}{
		{"8g", 8192, false, ""},
		{"2g", 2048, true, "MiB short"},
	} {
		t.Run(tt.size, func(t *testing.T) {
			state := t.TempDir()
			if err := unix.Mount("tmpfs", state, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+tt.size); err != nil {
				testenv.Unavailable(t, "mounting a tmpfs: "+err.Error())
			}
			t.Cleanup(func() { _ = unix.Unmount(state, unix.MNT_DETACH) })
			for _, d := range []string{"vats", "disk"} {
				if err := os.Mkdir(filepath.Join(state, d), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			// own: its owner's 64 MiB, 8 MiB of its image written;
			// deflt: --wall-disk-mib's 100 MiB, no image yet.
			for id, rec := range map[string]string{
				"own":   `{"id":"own","code":"sha256:` + strings.Repeat("a", 64) + `","limits":{"disk_mib":64}}`,
				"deflt": `{"id":"deflt","code":"sha256:` + strings.Repeat("b", 64) + `"}`,
			} {
				if err := os.WriteFile(filepath.Join(state, "vats", id+".json"), []byte(rec), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			img, err := os.OpenFile(filepath.Join(state, "disk", "own.img"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := img.Write(make([]byte, 8<<20)); err != nil {
				t.Fatal(err)
			}
			if err := img.Truncate(64 << 20); err != nil {
				t.Fatal(err)
			}
			if err := img.Close(); err != nil {
				t.Fatal(err)
			}
			c := diskRoomCheck(state, true, 100<<20, 1, true)
			t.Logf("%s: %s\nfix: %s", c.Name, c.Detail, c.Fix)
			for _, want := range []string{
				"2 vats' disk limits sum to 164 MiB, 8 MiB of it written",
				"1 package installs at once (--installs) take prepare folders of up to 2872 MiB",
				"together they may take 3028 MiB more",
				fmt.Sprintf("free of %d MiB", tt.sizeMiB),
				tt.shortMiB,
			} {
				if !strings.Contains(c.Detail, want) {
					t.Errorf("the check on a %s state file system: %q; want it to say %q", tt.size, c.Detail, want)
				}
			}
			if strings.Contains(c.Detail, "no --state given") {
				t.Errorf("the check of the operator's state dir: %q; it says it counted a folder of its own", c.Detail)
			}
			if c.Warn != tt.warn || c.OK == tt.warn {
				t.Errorf("the check on a %s state file system: ok %v warn %v; want warn %v (never a failure)", tt.size, c.OK, c.Warn, tt.warn)
			}
			if tt.warn {
				for _, want := range []string{"--wall-disk-mib", "100 MiB assumed", "disk_mib=N", "--installs (1 assumed here)", "larger file system"} {
					if !strings.Contains(c.Fix, want) {
						t.Errorf("the fix %q; want it to name %q", c.Fix, want)
					}
				}
			}
		})
	}
	// Where data folders have no limits the numbers would lie: it says so.
	// Without --state, doctor's own folder holds no vat: it says it
	// counted none, rather than "0 vats" as if it had looked.
	if c := diskRoomCheck(t.TempDir(), false, 100<<20, 1, true); !strings.Contains(c.Detail, "0 vats") || !strings.Contains(c.Detail, "no --state given") {
		t.Errorf("with no --state: %q; want it to say no vat was counted", c.Detail)
	}
	if c := diskRoomCheck(t.TempDir(), true, 100<<20, 1, false); !c.OK || c.Warn || !strings.Contains(c.Detail, "no disk limits here") {
		t.Errorf("with no disk limits: %+v; want ok, saying there are none", c)
	}
}
