//go:build linux

package tests

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"toybox/tests/testenv"
)

// limitsOf returns the limits in force a status shows, and what it runs
// without.
func limitsOf(st map[string]any) (inForce, unlimited map[string]any) {
	inForce, _ = st["limits"].(map[string]any)
	unlimited, _ = st["unlimited"].(map[string]any)
	return inForce, unlimited
}

// TestAttackMemoryHogServe: a vat that allocates past its memory limit is
// killed by the kernel, not the supervisor: toybox goes on serving, the
// vat's status says it ran out of memory (naming the limit, in English and
// Spanish), and it starts again after its backoff. Its status shows the
// limits in force, the owner's lower limit included.
func TestAttackMemoryHogServe(t *testing.T) {
	s := newStack(t, stackOpts{extra: []string{"--wall-memory-mib", "128", "--wall-cpus", "0.5"}})
	// Above the operator's: refused, nothing installed.
	if code, body := s.install("hog", example(t, "hog"), "memory_mib=256"); code != http.StatusBadRequest || !strings.Contains(body, "above this host's limit, 128 MiB") {
		t.Fatalf("PUT ?memory_mib=256 under a 128 MiB limit = %d %s; want 400 naming the limit", code, body)
	}
	st := s.mustInstall("hog", example(t, "hog"), "memory_mib=64")
	lim, unl := limitsOf(st)
	if lim["memory_mib"] != 64.0 || lim["cpus"] != 0.5 || lim["tasks"] == nil {
		t.Fatalf("limits in force = %v (without %v); want 64 MiB, 0.5 CPUs and a task limit", lim, unl)
	}
	s.mustGet("/hog/eat?mib=8", "hog: holding 8 MiB")
	// Past its limit: the request gets no answer from the app.
	if code, body := s.get("/hog/eat?mib=200"); code == http.StatusOK {
		t.Fatalf("GET /hog/eat?mib=200 = %d %q under a 64 MiB limit", code, body)
	}
	var seen map[string]any
	waitFor(t, "the vat's status to say it ran out of memory", 20*time.Second, func() bool {
		seen = s.status("hog")
		return seen["status"] == "off: it ran out of memory (64 MiB)"
	})
	if seen["status_es"] != "apagado: se quedó sin memoria (64 MiB)" {
		t.Errorf("status_es = %q", seen["status_es"])
	}
	// The supervisor lived through it, and the vat comes back.
	waitFor(t, "the vat to serve again", 30*time.Second, func() bool {
		return s.status("hog")["status"] == "walled"
	})
	if st := s.status("hog"); st["restarts"].(float64) < 1 || !strings.Contains(fmt.Sprint(st["last_exit"]), "ran out of memory") {
		t.Errorf("after the restart: restarts %v, last_exit %q; want a restart after running out of memory", st["restarts"], st["last_exit"])
	}
	s.mustGet("/hog/eat?mib=1", "hog: holding 1 MiB")
}

// TestAttackDiskFiller: a vat that fills its data folder, or its run
// folder, stops at its disk limit (ENOSPC) where the host can give it a
// file system of its own (root here); where it cannot, the status says it
// has no disk limit, and why.
func TestAttackDiskFiller(t *testing.T) {
	s := newStack(t, stackOpts{extra: []string{"--wall-disk-mib", "64"}})
	st := s.mustInstall("filler", example(t, "hog"), "disk_mib=32")
	lim, unl := limitsOf(st)
	if lim["disk_mib"] == nil {
		why, _ := unl["disk"].(string)
		if why == "" {
			t.Fatalf("the status claims neither a disk limit nor its absence: %v", st)
		}
		testenv.Unavailable(t, "no disk limit here: "+why)
	}
	if lim["disk_mib"] != 32.0 {
		t.Fatalf("disk limit in force = %v; want 32 MiB", lim["disk_mib"])
	}
	code, body := s.get("/filler/fill?mib=200")
	if code != http.StatusOK || !strings.Contains(body, "no space left on device") {
		t.Fatalf("GET /filler/fill?mib=200 = %d %q; want it stopped by ENOSPC", code, body)
	}
	var n int
	if _, err := fmt.Sscanf(body, "hog: wrote %d MiB", &n); err != nil || n > 32 {
		t.Errorf("the vat wrote %d MiB (%v) into a 32 MiB data folder", n, err)
	}
	// Its run folder (/run/toybox, where its socket is) was a folder of
	// the state file system, bound read-write: a vat held to 32 MiB
	// wrote 200 MiB there, and could have filled the host's disk. It is
	// a small file system of its own too.
	code, body = s.get("/filler/fill?mib=200&in=run")
	if code != http.StatusOK || !strings.Contains(body, "no space left on device") {
		t.Fatalf("GET /filler/fill?mib=200&in=run = %d %q; want it stopped by ENOSPC", code, body)
	}
	if _, err := fmt.Sscanf(body, "hog: wrote %d MiB", &n); err != nil || n > 1 {
		t.Errorf("the vat wrote %d MiB (%v) into its run folder; want at most 1", n, err)
	}
	// Raised by its owner (within the operator's 64): restarted with its
	// data, and room for more.
	code, body = s.adminDo("POST", "/filler/limits?disk_mib=64", nil)
	if code != http.StatusOK || !strings.Contains(body, `"disk_mib": 64`) {
		t.Fatalf("POST /filler/limits?disk_mib=64 = %d %s", code, body)
	}
	code, body = s.get("/filler/fill?mib=16")
	if code != http.StatusOK || !strings.Contains(body, "wrote 16 MiB: <nil>") {
		t.Errorf("after raising the limit: GET /filler/fill?mib=16 = %d %q", code, body)
	}
}

// TestShrinkBelowDataRefused: POST /<vat>/limits with a disk limit its
// files do not fit in answered 200, the vat off ("off: it could not run
// inside its wall", resize2fs: "New size smaller than minimum"), and the
// record kept the limit: the vat stayed off at every start until its owner
// guessed a larger one. The limit is refused (400, naming it), the old
// one stays in the record, and the vat runs again with its data.
func TestShrinkBelowDataRefused(t *testing.T) {
	s := newStack(t, stackOpts{extra: []string{"--wall-disk-mib", "64"}})
	st := s.mustInstall("hog", example(t, "hog"), "disk_mib=64")
	if lim, unl := limitsOf(st); lim["disk_mib"] == nil {
		testenv.Unavailable(t, fmt.Sprint("no disk limit here: ", unl["disk"]))
	}
	s.mustGet("/hog/fill?mib=40", "hog: wrote 40 MiB: <nil>")
	code, body := s.adminDo("POST", "/hog/limits?disk_mib=16", nil)
	if code != http.StatusBadRequest || !strings.Contains(body, "16 MiB") {
		t.Errorf("POST /hog/limits?disk_mib=16 over 40 MiB of data = %d %s; want 400 naming the limit", code, body)
	}
	st = s.waitWord("hog", "walled")
	if lim, _ := limitsOf(st); lim["disk_mib"] != 64.0 {
		t.Errorf("hog's disk limit after the refusal = %v; want 64 MiB", lim["disk_mib"])
	}
	b, err := os.ReadFile(filepath.Join(s.state, "vats", "hog.json"))
	if err != nil || !strings.Contains(string(b), `"disk_mib": 64`) {
		t.Errorf("hog's record after the refusal: %s %v; want disk_mib 64", b, err)
	}
	s.mustGet("/hog/fill?mib=4", "hog: wrote 4 MiB: <nil>")
}
