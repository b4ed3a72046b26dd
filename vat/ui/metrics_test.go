package ui

import (
	"regexp"
	"strings"
	"testing"

	"toybox/labels"
	"toybox/vat/grant"
)

// The Prometheus text format (0.0.4), line by line: a HELP or TYPE
// comment, or a sample whose label values hold only escaped quotes,
// backslashes and newlines.
var (
	metricName  = `[a-zA-Z_:][a-zA-Z0-9_:]*`
	labelValue  = `"(?:[^"\\\n]|\\\\|\\"|\\n)*"`
	labelPair   = `[a-zA-Z_][a-zA-Z0-9_]*=` + labelValue
	sampleLine  = regexp.MustCompile(`^(` + metricName + `)(?:\{` + labelPair + `(?:,` + labelPair + `)*\})? ([-+]?(?:[0-9.]+(?:[eE][-+]?[0-9]+)?|Inf|NaN))$`)
	helpLine    = regexp.MustCompile(`^# HELP (` + metricName + `) (?:[^\\\n]|\\\\|\\n)*$`)
	typeLine    = regexp.MustCompile(`^# TYPE (` + metricName + `) (counter|gauge|histogram|summary|untyped)$`)
	familyOfSmp = regexp.MustCompile(`_(bucket|sum|count)$`)
)

// TestMetricsExposition: the metrics parse as the text format, one family
// each, with every sample under its own family's TYPE, whatever a label
// value holds: here a vat name with a quote, a backslash, a newline and a
// forged sample line (the Recorder takes any string; the supervisor gives
// it only vat ids).
func TestMetricsExposition(t *testing.T) {
	u := newUI(t)
	const hostile = "a\"b\\c\n}toybox_switchboard_up 1\n# TYPE evil gauge"
	u.cfg.Activity.Decided(hostile, grant.Decision{Op: "connect", Target: labels.Request{Scheme: "tcp", Host: "example.org", Port: 1}, Outcome: grant.Refused, Reason: "egress to example.org not granted"})
	w := do(adminHandler(u), "GET", "/metrics", nil, "")
	if w.Code != 200 {
		t.Fatalf("GET /metrics = %d", w.Code)
	}
	body := w.Body.String()
	if !strings.HasSuffix(body, "\n") {
		t.Errorf("the metrics do not end with a newline")
	}
	typed := map[string]bool{}
	current := ""
	samples := 0
	for i, l := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		if m := helpLine.FindStringSubmatch(l); m != nil {
			continue
		}
		if m := typeLine.FindStringSubmatch(l); m != nil {
			if typed[m[1]] {
				t.Errorf("line %d: a second TYPE for %s", i+1, m[1])
			}
			typed[m[1]], current = true, m[1]
			continue
		}
		m := sampleLine.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("line %d is not in the text format: %q", i+1, l)
			continue
		}
		if m[1] != current && familyOfSmp.ReplaceAllString(m[1], "") != current {
			t.Errorf("line %d: sample %s under the TYPE of %s", i+1, m[1], current)
		}
		samples++
	}
	want := `toybox_egress_decisions_total{vat="a\"b\\c\n}toybox_switchboard_up 1\n# TYPE evil gauge",outcome="refused",reason="not_granted"} 1`
	if !strings.Contains(body, want+"\n") {
		t.Errorf("the metrics lack %s:\n%s", want, body)
	}
	if typed["evil"] || samples < 10 {
		t.Errorf("families %v, %d samples:\n%s", typed, samples, body)
	}
}
