package reach

import (
	"fmt"
	"strings"
	"testing"

	"toybox/labels"
	"toybox/vat/words"
)

func TestGrant(t *testing.T) {
	tests := []struct {
		name   string
		set    labels.Set
		en, es string
	}{
		{"https name", labels.Set{Scheme: "https", Host: "api.example.com"}, "HTTPS to api.example.com", "HTTPS a api.example.com"},
		{"https other port", labels.Set{Scheme: "https", Host: "api.example.com", Port: 8443}, "HTTPS to api.example.com:8443", "HTTPS a api.example.com:8443"},
		{"lan host", labels.Set{Host: "10.0.0.5", Port: 5432}, "the LAN host 10.0.0.5:5432", "el equipo de la red local 10.0.0.5:5432"},
		{"loopback", labels.Set{Host: "127.0.0.1", Port: 8000}, "this computer at 127.0.0.1:8000", "este ordenador en 127.0.0.1:8000"},
		{"ipv6 loopback", labels.Set{Host: "::1", Port: 80}, "this computer at [::1]:80", "este ordenador en [::1]:80"},
		{"public ip", labels.Set{Host: "203.0.113.9", Port: 22}, "the host 203.0.113.9:22", "el equipo 203.0.113.9:22"},
		{"name any port", labels.Set{Host: "example.com"}, "example.com, any port", "example.com, cualquier puerto"},
		{"any public", labels.Set{Network: "public"}, "any public address", "cualquier dirección pública"},
		{"port of any", labels.Set{Port: 443}, "port 443 of any host", "el puerto 443 de cualquier equipo"},
		{"manifest", labels.Set{Scheme: "https", Host: "example.org", Origin: labels.OriginManifest}, "HTTPS to example.org (from its manifest)", "HTTPS a example.org (de su manifiesto)"},
		{"cgnat", labels.Set{Host: "100.64.1.2", Port: 9}, "the LAN host 100.64.1.2:9", "el equipo de la red local 100.64.1.2:9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Grant(tt.set, "en"); got != tt.en {
				t.Errorf("Grant(%v, en) = %q; want %q", tt.set, got, tt.en)
			}
			if got := Grant(tt.set, "es"); got != tt.es {
				t.Errorf("Grant(%v, es) = %q; want %q", tt.set, got, tt.es)
			}
		})
	}
	if got := Grants([]labels.Set{{Scheme: "https", Host: "api.example.com"}, {Host: "10.0.0.5", Port: 5432}}, "en"); got != "HTTPS to api.example.com; the LAN host 10.0.0.5:5432" {
		t.Errorf("Grants = %q", got)
	}
}

func TestExplain(t *testing.T) {
	f := Facts{ID: "erin", Word: words.Walled, Grant: []labels.Set{{Host: "127.0.0.1", Port: 8000}}, Network: "local", Dropped: []string{`{"host":"127.0.0.1","port":5432}: no compose file`}}
	got := strings.Join(Explain(f, "en"), "\n")
	for _, want := range []string{"erin is walled.", "this computer at 127.0.0.1:8000", "Nothing else", "local handle", "asked for", "no doors"} {
		if !strings.Contains(got, want) {
			t.Errorf("Explain = %q; want it to say %q", got, want)
		}
	}
	f.Down = "connection refused"
	if got := strings.Join(Explain(f, "es"), "\n"); !strings.Contains(got, "la centralita no responde (connection refused)") {
		t.Errorf("Explain(es) with the switchboard down = %q", got)
	}
	none := strings.Join(Explain(Facts{ID: "x", Word: words.NotWalledChoice}, "en"), "\n")
	if !strings.Contains(none, "no grant") || !strings.Contains(none, "without its wall") {
		t.Errorf("Explain(unwalled, no grant) = %q", none)
	}
}

// TestExplainUnwalledClaimsNoWall: a vat that runs without its wall uses
// the network toybox has, Handle or not. Its answer never says that it
// reaches nothing, or that every other address is refused; a vat inside
// its wall that shares a host folder is still walled off the network.
func TestExplainUnwalledClaimsNoWall(t *testing.T) {
	grant := []labels.Set{{Host: "127.0.0.1", Port: 8000}}
	for _, w := range []words.Word{words.NotWalledChoice, words.NotWalledOperator, words.NotWalledHost, words.NotWalledApproved, words.NotWalledNoBwrap, words.NotWalledNoBwrapDocker} {
		for _, g := range [][]labels.Set{nil, grant} {
			for _, lang := range []string{"en", "es"} {
				got := strings.Join(Explain(Facts{ID: "x", Word: w, Grant: g, Network: "local"}, lang), "\n")
				got += strings.Join(Explain(Facts{ID: "x", Word: w, Grant: g, Down: "refused"}, lang), "\n")
				got += strings.Join(Explain(Facts{ID: "x", Word: w, Grant: g, NoSwitchboard: true}, lang), "\n")
				for _, never := range []string{noGrant.in(lang), nothingElse.in(lang), fmt.Sprintf(sbDown.in(lang), "refused"), sbNone.in(lang)} {
					if strings.Contains(got, never) {
						t.Errorf("Explain(%s, grant %v, %s) = %q; it says %q of a vat without a wall", w, g, lang, got, never)
					}
				}
				if !strings.Contains(got, unwalled.in(lang)) {
					t.Errorf("Explain(%s, %s) = %q; want it to say it runs without its wall", w, lang, got)
				}
			}
		}
	}
	got := strings.Join(Explain(Facts{ID: "x", Word: words.NotWalledShares, Grant: grant, Network: "local"}, "en"), "\n")
	if strings.Contains(got, unwalled.in("en")) || !strings.Contains(got, nothingElse.in("en")) {
		t.Errorf("Explain(shares) = %q; want it walled off the network but for its grant", got)
	}
}

// TestExplainByWhatRuns: whether the vat runs without a wall is what runs
// now, not only its word. A walled vat that stopped answering is still
// walled; an unwalled app that is starting already runs, and can use
// toybox's network before it listens.
func TestExplainByWhatRuns(t *testing.T) {
	deaf := strings.Join(Explain(Facts{ID: "x", Word: words.NotAnswering}, "en"), "\n")
	if strings.Contains(deaf, unwalled.in("en")) || !strings.Contains(deaf, noGrant.in("en")) {
		t.Errorf("Explain(walled, not answering) = %q; want it walled", deaf)
	}
	for _, w := range []words.Word{words.Starting, words.NotAnswering} {
		got := strings.Join(Explain(Facts{ID: "x", Word: w, Unwalled: true}, "en"), "\n")
		if !strings.Contains(got, unwalled.in("en")) || strings.Contains(got, noGrant.in("en")) {
			t.Errorf("Explain(%s, running without a wall) = %q; want it said unwalled", w, got)
		}
	}
}

// TestAskSwitchboard: the grants whose address is on this computer or the
// LAN are asked of the switchboard, with their own host and port; a public
// address, a name that is not loopback, or a grant without one target is
// not.
func TestAskSwitchboard(t *testing.T) {
	tests := []struct {
		name string
		set  labels.Set
		want labels.Request // zero: not asked
	}{
		{"loopback", labels.Set{Host: "127.0.0.1", Port: 8000}, labels.Request{Scheme: "tcp", Host: "127.0.0.1", Port: 8000}},
		{"lan https", labels.Set{Scheme: "https", Host: "10.0.0.5"}, labels.Request{Scheme: "https", Host: "10.0.0.5", Port: 443}},
		{"ipv6 loopback", labels.Set{Host: "::1", Port: 80}, labels.Request{Scheme: "tcp", Host: "::1", Port: 80}},
		{"localhost", labels.Set{Scheme: "http", Host: "localhost"}, labels.Request{Scheme: "http", Host: "localhost", Port: 80}},
		{"cgnat", labels.Set{Host: "100.64.1.2", Port: 9}, labels.Request{Scheme: "tcp", Host: "100.64.1.2", Port: 9}},
		{"public ip", labels.Set{Host: "203.0.113.9", Port: 22}, labels.Request{}},
		{"name", labels.Set{Scheme: "https", Host: "api.example.com"}, labels.Request{}},
		{"loopback any port", labels.Set{Host: "127.0.0.1"}, labels.Request{}},
		{"any host", labels.Set{Port: 443}, labels.Request{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := AskSwitchboard(tt.set)
			if ok != (tt.want != labels.Request{}) || got != tt.want {
				t.Errorf("AskSwitchboard(%v) = %v, %v; want %v", tt.set, got, ok, tt.want)
			}
		})
	}
}

// TestExplainSaysTheSwitchboardsRefusal: a grant the switchboard refuses
// now is said with its reason, and no "it can reach" stands above it.
func TestExplainSaysTheSwitchboardsRefusal(t *testing.T) {
	f := Facts{
		ID: "erin", Word: words.Walled, Network: "public",
		Grant: []labels.Set{{Host: "127.0.0.1", Port: 8000}, {Scheme: "https", Host: "api.example.com"}},
		Now:   map[int]Verdict{0: {Reason: "127.0.0.1 is a loopback address; this handle reaches public addresses only"}},
	}
	for _, tt := range []struct{ lang, line, head string }{
		{"en", "  - this computer at 127.0.0.1:8000: the switchboard refuses it now: 127.0.0.1 is a loopback address; this handle reaches public addresses only", "Its grant names:"},
		{"es", "  - este ordenador en 127.0.0.1:8000: la centralita lo rechaza ahora: 127.0.0.1 is a loopback address; this handle reaches public addresses only", "Su permiso nombra:"},
	} {
		got := strings.Join(Explain(f, tt.lang), "\n")
		if !strings.Contains(got, tt.line) || !strings.Contains(got, tt.head) || strings.Contains(got, itCanReach.in(tt.lang)) {
			t.Errorf("Explain(%s) = %q; want %q under %q", tt.lang, got, tt.line, tt.head)
		}
		if !strings.Contains(got, "  - "+Grant(f.Grant[1], tt.lang)+"\n") {
			t.Errorf("Explain(%s) = %q; want the grant not asked said as it is", tt.lang, got)
		}
	}
	f.Now = map[int]Verdict{0: {Unanswered: true, Reason: "context deadline exceeded"}}
	if got := strings.Join(Explain(f, "en"), "\n"); !strings.Contains(got, "127.0.0.1:8000: the switchboard did not say whether it admits it (context deadline exceeded)") || strings.Contains(got, "refuses") {
		t.Errorf("Explain with no answer = %q; want no answer said, no refusal claimed", got)
	}
	f.Now = map[int]Verdict{0: {Allow: true}}
	if got := strings.Join(Explain(f, "en"), "\n"); !strings.Contains(got, itCanReach.en) || strings.Contains(got, "refuses") {
		t.Errorf("Explain with the switchboard admitting it = %q; want it can reach, no refusal", got)
	}
}
