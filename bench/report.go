package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strings"
)

// Verdicts of a row.
const (
	VerdictPass        = "pass"
	VerdictFail        = "FAIL"
	VerdictReport      = "report"
	VerdictNotMeasured = "not measured"
)

// TargetKind says how a row's target is judged.
type TargetKind string

// Target kinds.
const (
	RatioAtLeast TargetKind = "ratio>="  // ours/baseline must be at least Value
	RatioAtMost  TargetKind = "ratio<="  // ours/baseline must be at most Value
	AtMost       TargetKind = "ours<="   // ours must be at most Value (no baseline)
	ReportOnly   TargetKind = "report"   // no pass/fail; Value (if any) is a reference ratio
	ReportAtMost TargetKind = "report<=" // no pass/fail; Value is a reference for ours
	ReportRatio  TargetKind = "reportratio"
)

// Target is what a row is judged against.
type Target struct {
	Kind  TargetKind `json:"kind"`
	Value float64    `json:"value,omitempty"`
}

func (t Target) String() string {
	switch t.Kind {
	case RatioAtLeast:
		return fmt.Sprintf("≥ %g×", t.Value)
	case RatioAtMost:
		return fmt.Sprintf("≤ %g×", t.Value)
	case AtMost:
		return fmt.Sprintf("≤ %g", t.Value)
	case ReportRatio:
		if t.Value > 0 {
			return fmt.Sprintf("report (≥ %g×)", t.Value)
		}
		return "report"
	default:
		return "report"
	}
}

// Row is one line of the table.
type Row struct {
	ID           string   `json:"id"`
	Figure       string   `json:"figure"`
	Unit         string   `json:"unit"`
	BaselineName string   `json:"baselineName,omitempty"`
	Baseline     *float64 `json:"baseline,omitempty"`
	Ours         *float64 `json:"ours,omitempty"`
	Ratio        *float64 `json:"ratio,omitempty"`
	Target       Target   `json:"target"`
	Verdict      string   `json:"verdict"`
	// Note says how it was measured, or, when not measured, why not.
	Note string `json:"note,omitempty"`
	// Failures counts our attempts that failed (a transfer or a connect
	// that broke); a row with failures fails, whatever its median says.
	Failures int    `json:"failures,omitempty"`
	Attempts int    `json:"attempts,omitempty"`
	FirstErr string `json:"firstError,omitempty"`
	// BaselineSamples and OurSamples are the per-repeat values.
	BaselineSamples Samples `json:"baselineSamples,omitempty"`
	OurSamples      Samples `json:"ourSamples,omitempty"`
}

func ptr(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// Judge fills Ratio and Verdict from Baseline, Ours and Target.
func (r *Row) Judge() {
	if r.Ours == nil {
		r.Verdict = VerdictNotMeasured
		return
	}
	if r.Baseline != nil && *r.Baseline != 0 {
		r.Ratio = ptr(*r.Ours / *r.Baseline)
	}
	ok := true
	switch r.Target.Kind {
	case RatioAtLeast:
		ok = r.Ratio != nil && *r.Ratio >= r.Target.Value
	case RatioAtMost:
		ok = r.Ratio != nil && *r.Ratio <= r.Target.Value
	case AtMost:
		ok = *r.Ours <= r.Target.Value
	default:
		r.Verdict = VerdictReport
		if r.Failures > 0 {
			r.Verdict = VerdictFail
		}
		return
	}
	if r.Failures > 0 {
		ok = false
	}
	if ok {
		r.Verdict = VerdictPass
	} else {
		r.Verdict = VerdictFail
	}
}

// NotMeasured marks r as not measured and says why.
func (r *Row) NotMeasured(why string) {
	r.Ours, r.Ratio = nil, nil
	r.Verdict = VerdictNotMeasured
	r.Note = "not measured: " + why
}

// Machine describes where the run happened.
type Machine struct {
	Cores  int    `json:"cores"`
	CPU    string `json:"cpu,omitempty"`
	Kernel string `json:"kernel"`
	Go     string `json:"go"`
	Load   string `json:"load,omitempty"` // /proc/loadavg at the start
}

func (m Machine) String() string {
	s := fmt.Sprintf("%d cores", m.Cores)
	if m.CPU != "" {
		s += " (" + m.CPU + ")"
	}
	s += ", Linux " + m.Kernel + ", " + m.Go
	if m.Load != "" {
		s += ", load average at start " + m.Load
	}
	return s
}

// Results is the JSON twin of the table.
type Results struct {
	Started  string  `json:"started"`
	Duration string  `json:"duration"`
	Commit   string  `json:"commit,omitempty"`
	Machine  Machine `json:"machine"`
	Rows     []Row   `json:"rows"`
}

// WriteJSON writes r to path, indented.
func WriteJSON(path string, r Results) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func fmtVal(v *float64) string {
	if v == nil {
		return "—"
	}
	a := math.Abs(*v)
	switch {
	case a >= 100:
		return fmt.Sprintf("%.0f", *v)
	case a >= 10:
		return fmt.Sprintf("%.1f", *v)
	default:
		return fmt.Sprintf("%.2f", *v)
	}
}

// Table renders the rows as a markdown table with the machine line.
func Table(r Results) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Run %s (%s), commit %s.  \nMachine: %s.\n\n", r.Started, r.Duration, r.Commit, r.Machine)
	b.WriteString("| figure | unit | baseline | ours | ratio | target | result |\n|---|---|---:|---:|---:|---|---|\n")
	for _, row := range r.Rows {
		base := fmtVal(row.Baseline)
		if row.BaselineName != "" {
			base += " (" + row.BaselineName + ")"
		}
		ratio := "—"
		if row.Ratio != nil {
			ratio = fmt.Sprintf("%.2f×", *row.Ratio)
		}
		verdict := row.Verdict
		if row.Verdict == VerdictNotMeasured {
			verdict = row.Note
		}
		if row.Failures > 0 {
			verdict += fmt.Sprintf(" (%d of %d attempts failed: %s)", row.Failures, row.Attempts, row.FirstErr)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", row.Figure, row.Unit, base, fmtVal(row.Ours), ratio, row.Target, verdict)
	}
	b.WriteString("\nHow each row was measured:\n\n")
	for _, row := range r.Rows {
		if row.Note != "" && row.Verdict != VerdictNotMeasured {
			fmt.Fprintf(&b, "- **%s**: %s\n", row.Figure, row.Note)
		}
	}
	return b.String()
}

// Markers delimit the generated part of docs/benchmarks.md; the text
// outside them is written by hand and kept.
const (
	BeginMarker = "<!-- bench:begin (generated by make bench; edit outside the markers) -->"
	EndMarker   = "<!-- bench:end -->"
)

// WriteMarkdown replaces the generated part of the file at path with table,
// keeping everything outside the markers. A file without markers gets them
// appended.
func WriteMarkdown(path, table string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	s := string(old)
	gen := BeginMarker + "\n" + table + EndMarker
	i, j := strings.Index(s, BeginMarker), strings.Index(s, EndMarker)
	switch {
	case i >= 0 && j > i:
		s = s[:i] + gen + s[j+len(EndMarker):]
	case s == "":
		s = "# Benchmarks\n\n" + gen + "\n"
	default:
		s = strings.TrimRight(s, "\n") + "\n\n" + gen + "\n"
	}
	return os.WriteFile(path, []byte(s), 0o644)
}
