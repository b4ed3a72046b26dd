package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestJudge(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		name      string
		row       Row
		want      string
		wantRatio float64
	}{
		{"ratio at least, met", Row{Baseline: f(100), Ours: f(95), Target: Target{Kind: RatioAtLeast, Value: 0.9}}, VerdictPass, 0.95},
		{"ratio at least, missed", Row{Baseline: f(100), Ours: f(80), Target: Target{Kind: RatioAtLeast, Value: 0.9}}, VerdictFail, 0.8},
		{"ratio at most, met", Row{Baseline: f(400), Ours: f(300), Target: Target{Kind: RatioAtMost, Value: 1}}, VerdictPass, 0.75},
		{"ratio at most, missed", Row{Baseline: f(400), Ours: f(800), Target: Target{Kind: RatioAtMost, Value: 1}}, VerdictFail, 2},
		{"absolute, met", Row{Ours: f(120), Target: Target{Kind: AtMost, Value: 150}}, VerdictPass, 0},
		{"absolute, missed", Row{Ours: f(151), Target: Target{Kind: AtMost, Value: 150}}, VerdictFail, 0},
		{"report", Row{Baseline: f(3000), Ours: f(600), Target: Target{Kind: ReportRatio, Value: 0.25}}, VerdictReport, 0.2},
		{"no ours", Row{Baseline: f(3000), Target: Target{Kind: RatioAtLeast, Value: 0.9}}, VerdictNotMeasured, 0},
		{"ratio target without a baseline fails", Row{Ours: f(1), Target: Target{Kind: RatioAtLeast, Value: 0.9}}, VerdictFail, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.row
			r.Judge()
			if r.Verdict != tt.want {
				t.Errorf("Judge() verdict = %q; want %q", r.Verdict, tt.want)
			}
			if tt.wantRatio != 0 && (r.Ratio == nil || *r.Ratio != tt.wantRatio) {
				t.Errorf("Judge() ratio = %v; want %v", r.Ratio, tt.wantRatio)
			}
		})
	}
}

func TestWriteMarkdownKeepsHandWrittenText(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.md")
	if err := WriteMarkdown(path, "table one\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	s := strings.Replace(string(b), EndMarker, EndMarker+"\n\nhand-written notes\n", 1)
	s = strings.Replace(s, "# Benchmarks\n", "# Benchmarks\n\nintro\n", 1)
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteMarkdown(path, "table two\n"); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	got := string(b)
	for _, want := range []string{"intro", "table two", "hand-written notes"} {
		if !strings.Contains(got, want) {
			t.Errorf("after rewrite, file lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "table one") {
		t.Errorf("after rewrite, the old table is still there:\n%s", got)
	}
	if n := strings.Count(got, BeginMarker); n != 1 {
		t.Errorf("file has %d begin markers; want 1", n)
	}
}
