package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTerm(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "walled", "walled"},
		{"non-ASCII kept", "café 中文 ñ — “x”", "café 中文 ñ — “x”"},
		{"emoji kept", "🦊", "🦊"},
		{"OSC 52", "a\x1b]52;c;aGk=\x07b", `a\x1b]52;c;aGk=\x07b`},
		{"CSI", "\x1b[2J\x1b[1A", `\x1b[2J\x1b[1A`},
		{"carriage return", "bad\rgood", `bad\rgood`},
		{"newline", "one\ntwo", `one\ntwo`},
		{"tab", "a\tb", `a\tb`},
		{"NUL and DEL", "a\x00b\x7f", `a\x00b\x7f`},
		{"C1 CSI", "a\u009b2J", `a\u009b2J`},
		{"bidi override", "abc\u202edcba", `abc\u202edcba`},
		{"bidi isolate", "\u2066x\u2069", `\u2066x\u2069`},
		{"zero width", "a\u200bb\ufeff", `a\u200bb\ufeff`},
		{"line separator", "a\u2028b\u2029", `a\u2028b\u2029`},
		{"tag character", "a\U000e0041", `a\U000e0041`},
		{"not UTF-8", "a\xffb\xc3", `a\xffb\xc3`},
		{"backslash kept", `C:\x`, `C:\x`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := term(tt.in); got != tt.want {
				t.Errorf("term(%q) = %q; want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestTermCutsALongField(t *testing.T) {
	in := strings.Repeat("é", termMax) // 2 bytes each
	got := term(in)
	want := strings.Repeat("é", termMax/2) + "… (2000 bytes more)"
	if got != want {
		t.Errorf("term(%d bytes) = %d bytes ending %q; want %d bytes ending %q", len(in), len(got), got[len(got)-30:], len(want), want[len(want)-30:])
	}
}

// terminalSafe reports why s could act on a terminal, or "".
func terminalSafe(s string) string {
	if !utf8.ValidString(s) {
		return "not UTF-8"
	}
	for _, r := range s {
		if unsafeRune(r) {
			return "holds " + string(r)
		}
	}
	return ""
}

func FuzzTerm(f *testing.F) {
	for _, s := range []string{"walled", "a\x1b]52;c;aGk=\x07", "x\u202ey", "a\xffb", "中文\r\n", strings.Repeat("\x1b", termMax+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := term(s)
		if why := terminalSafe(got); why != "" {
			t.Fatalf("term(%q) = %q: %s", s, got, why)
		}
		if len(s) <= termMax/4 && term(got) != got {
			t.Fatalf("term(term(%q)) = %q; want %q", s, term(got), got)
		}
		if len(got) > 4*termMax+40 {
			t.Fatalf("term of %d bytes is %d bytes", len(s), len(got))
		}
	})
}

func TestJSONForTerminal(t *testing.T) {
	v := map[string]any{"x": "a\u202eb\u009b\U000e0041 é 中文 \x1b[2J \x7f"}
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	got := jsonForTerminal(j)
	if why := terminalSafe(string(got)); why != "" {
		t.Errorf("jsonForTerminal(%s) = %s: %s", j, got, why)
	}
	var back map[string]any
	if err := json.Unmarshal(got, &back); err != nil || back["x"] != v["x"] {
		t.Errorf("jsonForTerminal(%s) = %s, which reads as %q (%v); want %q", j, got, back["x"], err, v["x"])
	}
	if !strings.Contains(string(got), `é 中文`) {
		t.Errorf("jsonForTerminal(%s) = %s; want é 中文 kept", j, got)
	}
}

// hostileAdmin serves an admin socket whose every answer holds bytes a
// vat could have put there.
func hostileAdmin(t *testing.T) string {
	t.Helper()
	const evil = "\x1b]52;c;aGk=\x07\x1b[2K\r\u202e"
	page := map[string]any{
		"host":    map[string]any{"walls": "on" + evil, "switchboard": "answering" + evil},
		"notices": []any{map[string]any{"title": "a notice" + evil + "\nnotice: forged"}},
		"vats": []any{map[string]any{
			"id": "zed", "word": "walled" + evil, "code": "sha256:\x1b[2J0123456789abcdef", "grant": []string{"HTTPS to x" + evil},
			"facts": []any{
				map[string]any{"key": "restarts", "values": []string{"1"}},
				map[string]any{"key": "last_error", "values": []string{"it said " + evil + "\nzed\twalled"}},
			},
		}},
	}
	sock := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/ui/status.json":
			_ = json.NewEncoder(w).Encode(page)
		case r.URL.Path == "/zed/reach":
			_ = json.NewEncoder(w).Encode(map[string]any{"lines": []string{"zed is walled" + evil, "Its doors: x" + evil + "\nIt can reach everything."}})
		case r.Method == http.MethodPut:
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": "bad package tarball: tb-x" + evil + "\nzed\twalled has no bin to start"})
		default:
			http.NotFound(w, r)
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sock
}

// TestCLIEscapesTheSupervisorsText runs the commands that print what the
// supervisor answered against an admin socket whose answers hold escape
// sequences, carriage returns, newlines and bidi overrides: each reaches
// the terminal escaped, and forges no line.
func TestCLIEscapesTheSupervisorsText(t *testing.T) {
	sock := hostileAdmin(t)
	tests := []struct {
		name  string
		main  func([]string) int
		args  []string
		code  int
		lines int // how many lines it prints
		want  []string
	}{
		{"status", statusMain, []string{"--admin", sock}, 0, 4, []string{
			`walls: on\x1b]52;c;aGk=\x07\x1b[2K\r\u202e`, `notice: a notice\x1b]52;c;aGk=\x07\x1b[2K\r\u202e\nnotice: forged`,
			`walled\x1b]52`, `sha256:\x1b[2J01234567…`, `it said \x1b]52;c;aGk=\x07\x1b[2K\r\u202e\nzed\twalled`,
		}},
		{"status --json", statusMain, []string{"--admin", sock, "--json"}, 0, 1, []string{`\u001b]52;c;aGk=\u0007\u001b[2K\r\u202e`}},
		{"reach", reachMain, []string{"--admin", sock, "zed"}, 0, 2, []string{`Its doors: x\x1b]52;c;aGk=\x07\x1b[2K\r\u202e\nIt can reach everything.`}},
		{"reach --json", reachMain, []string{"--admin", sock, "--json", "zed"}, 0, 1, []string{`\u202e`}},
		{"install", installMain, []string{"--admin", sock, "zed", "npm:tb-x"}, 1, 1, []string{`tb-x\x1b]52;c;aGk=\x07\x1b[2K\r\u202e\nzed\twalled has no bin`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := runCapturing(t, func() int { return tt.main(tt.args) })
			if code != tt.code {
				t.Errorf("toybox %s = %d %q; want %d", tt.name, code, out, tt.code)
			}
			if why := terminalSafe(strings.ReplaceAll(out, "\n", "")); why != "" {
				t.Errorf("toybox %s printed %q: %s", tt.name, out, why)
			}
			if n := strings.Count(out, "\n"); n != tt.lines {
				t.Errorf("toybox %s printed %d lines; want %d:\n%s", tt.name, n, tt.lines, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("toybox %s = %q; want it to say %q", tt.name, out, w)
				}
			}
		})
	}
}

// runCapturing runs f with os.Stdout and os.Stderr going to one pipe, and
// returns what f returned and what it wrote.
func runCapturing(t *testing.T, f func() int) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	oldOut, oldErr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = w, w
	got := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		got <- string(b)
	}()
	code := f()
	os.Stdout, os.Stderr = oldOut, oldErr
	w.Close()
	return code, <-got
}

// TestTerminalJSONLog: a record through terminalJSON reads back the same,
// and holds no character a terminal acts on.
func TestTerminalJSONLog(t *testing.T) {
	var b strings.Builder
	log := slog.New(slog.NewJSONHandler(terminalJSON{&b}, nil))
	const line = "bwrap: \x1b]52;c;aGk=\x07\r ok \u202elam \u009b2J \U000e0041 é 中文"
	log.Info("vat off", "vat", "zed", "exit", line)
	log.Info("second")
	out := b.String()
	if why := terminalSafe(strings.ReplaceAll(out, "\n", "")); why != "" {
		t.Errorf("the log = %q: %s", out, why)
	}
	recs := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	var rec map[string]any
	if len(recs) != 2 || json.Unmarshal([]byte(recs[0]), &rec) != nil || rec["exit"] != line {
		t.Errorf("the log = %q; want two records, the first with exit %q", out, line)
	}
}
