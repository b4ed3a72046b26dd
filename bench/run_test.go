package bench

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"toybox/tests/testenv"
)

// buildBinaries builds what `make bench` builds into dir.
func buildBinaries(t *testing.T, dir string) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to build the binaries: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct {
		pkg   string
		env   []string
		flags []string
	}{
		{"./cmd/switchboard", nil, nil},
		{"./cmd/toybox", nil, nil},
		{"./cmd/toybox-entry", nil, testenv.EntryBuildFlags},
		{"./bench/cmd/benchvat", []string{"CGO_ENABLED=0"}, nil},
		{"./bench/cmd/benchmcp", []string{"CGO_ENABLED=0"}, nil},
		{"./bench/cmd/toybench", nil, nil},
	} {
		cmd := exec.Command(goTool, append(append([]string{"build"}, b.flags...), "-o", dir+"/", b.pkg)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), b.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
}

// TestRunSmall runs the whole benchmark with tiny sizes against the real
// binaries: every row must be measured, so that `make bench` cannot rot
// into a table of "not measured" without a test saying so.
func TestRunSmall(t *testing.T) {
	testenv.RequireBwrap(t)
	// Not t.TempDir: its parent is 0700, and the walls run as another uid
	// that must reach toybox-entry and the code by path (bwrap resolves a
	// bind's /proc/self/fd source as that uid).
	bin, err := os.MkdirTemp("", "toybench-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(bin) })
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	buildBinaries(t, bin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var logs strings.Builder
	res, err := Run(ctx, Config{
		Bin: bin, Self: filepath.Join(bin, "toybench"),
		Repeats: 1, Bytes: 4 << 20, LatencyRounds: 1, LatencyPerRound: 10,
		Spawns: 2, Vats: 2, HeldConns: 100, MCPSessions: 2, MCPCalls: 20,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, logs.String())
	}
	if len(res.Rows) != len(newRows()) {
		t.Fatalf("Run gave %d rows; want %d", len(res.Rows), len(newRows()))
	}
	for _, row := range res.Rows {
		// A count whose target is zero is measured at zero.
		zeroOK := row.Target == Target{Kind: AtMost, Value: 0}
		if row.Verdict == VerdictNotMeasured || row.Ours == nil || *row.Ours < 0 || *row.Ours == 0 && !zeroOK {
			t.Errorf("row %s: verdict %q, ours %v, note %q; want it measured", row.ID, row.Verdict, row.Ours, row.Note)
		}
		if row.Failures > 0 {
			t.Logf("row %s: %d of %d attempts failed: %s", row.ID, row.Failures, row.Attempts, row.FirstErr)
		}
	}
	md := filepath.Join(t.TempDir(), "b.md")
	if err := WriteMarkdown(md, Table(res)); err != nil {
		t.Fatal(err)
	}
	js := filepath.Join(t.TempDir(), "r.json")
	if err := WriteJSON(js, res); err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		t.Logf("runner log:\n%s", logs.String())
	}
}
