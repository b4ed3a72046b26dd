package words

import (
	"strings"
	"testing"

	"toybox/vat/wall"
)

func TestEveryWordHasBothLanguages(t *testing.T) {
	seen := map[string]Word{}
	for _, w := range All() {
		en, es := w.In("en"), w.In("es")
		if en == "" || es == "" {
			t.Errorf("word %d: en=%q es=%q; want both set", w, en, es)
		}
		if w != Unknown && en == Unknown.String() {
			t.Errorf("word %d has no entry in the table", w)
		}
		if prev, dup := seen[en]; dup {
			t.Errorf("words %d and %d share %q", prev, w, en)
		}
		seen[en] = w
	}
}

func TestFromTier(t *testing.T) {
	tests := []struct {
		name, tier string
		want       Word
	}{
		{"walled", wall.TierWalled, Walled},
		{"no seccomp", wall.TierWalledNoSeccomp, WalledNoSeccomp},
		{"unknown tier is never walled", "walled-maybe", Unknown},
		{"empty", "", Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FromTier(tt.tier); got != tt.want {
				t.Errorf("FromTier(%q) = %v; want %v", tt.tier, got, tt.want)
			}
		})
	}
}

func TestOffAndServing(t *testing.T) {
	for _, w := range All() {
		if w.Off() && w.Serving() {
			t.Errorf("%q is both off and serving", w)
		}
	}
	if !OffStopped.Off() || !OffWall.Off() {
		t.Error("off words must report Off")
	}
	if !Walled.Serving() || !NotWalledChoice.Serving() {
		t.Error("running words must report Serving")
	}
	// Requests go to an app that serves, and to one that last did not
	// answer (that is how it is seen to answer again); not to one
	// starting, stopping or off.
	for _, w := range All() {
		want := w.Serving() || w == NotAnswering
		if w.Routed() != want {
			t.Errorf("%q: Routed() = %v; want %v", w, w.Routed(), want)
		}
	}
	if NotAnswering.Serving() || !NotAnswering.Routed() || Starting.Routed() || Stopping.Routed() {
		t.Error("NotAnswering is routed but not serving; Starting and Stopping are neither")
	}
	if got := OffWall.In("es"); got != "apagado: no pudo funcionar dentro de su muro" {
		t.Errorf("OffWall.In(es) = %q", got)
	}
}

func TestWith(t *testing.T) {
	tests := []struct {
		name, lang, detail, want string
	}{
		{"english", "en", "512 MiB", "off: it ran out of memory (512 MiB)"},
		{"spanish", "es", "512 MiB", "apagado: se quedó sin memoria (512 MiB)"},
		{"no detail", "en", "", "off: it ran out of memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := OffMemory.With(tt.lang, tt.detail); got != tt.want {
				t.Errorf("OffMemory.With(%q, %q) = %q; want %q", tt.lang, tt.detail, got, tt.want)
			}
		})
	}
	if OffMemory.Off() {
		t.Error("OffMemory reports Off: the vat starts again after its backoff")
	}
}

func TestEveryPhraseHasBothLanguages(t *testing.T) {
	seen := map[string]Phrase{}
	for _, p := range Phrases() {
		en, es := p.In("en"), p.In("es")
		if en == "" || es == "" {
			t.Errorf("phrase %d: en=%q es=%q; want both set", p, en, es)
		}
		if prev, dup := seen[en]; dup {
			t.Errorf("phrases %d and %d share %q", prev, p, en)
		}
		seen[en] = p
	}
	if len(Phrases()) != len(phrases) {
		t.Errorf("Phrases() lists %d; the table has %d", len(Phrases()), len(phrases))
	}
}

func TestEveryLineHasBothLanguages(t *testing.T) {
	for _, l := range Lines() {
		en, es := l.In("en"), l.In("es")
		if en == "" || es == "" || en == es {
			t.Errorf("line %d: en=%q es=%q; want both set, and different", l, en, es)
		}
		if strings.Count(en, "%s") != strings.Count(es, "%s") {
			t.Errorf("line %d: en and es take different numbers of names", l)
		}
	}
}

func TestNamedWord(t *testing.T) {
	if got, want := NotWalledShares.With("en", "Crow's database"), "not walled: shares Crow's database"; got != want {
		t.Errorf("With = %q; want %q", got, want)
	}
	if got, want := NotWalledShares.With("es", "la base de Crow"), "sin muro: comparte la base de Crow"; got != want {
		t.Errorf("With(es) = %q; want %q", got, want)
	}
	if got, want := OffMemory.With("en", "64 MiB"), "off: it ran out of memory (64 MiB)"; got != want {
		t.Errorf("With = %q; want %q", got, want)
	}
}

// TestUnwalled: every word that reads "not walled" says so, and every
// unwalled word is one a running app has.
func TestUnwalled(t *testing.T) {
	for _, w := range All() {
		if got := strings.HasPrefix(w.String(), "not walled"); got != w.NotWalled() {
			t.Errorf("%q: NotWalled() = %v", w, w.NotWalled())
		}
		if w.Unwalled() && (!w.NotWalled() || !w.Serving()) {
			t.Errorf("%q is unwalled but not a serving not-walled word", w)
		}
	}
	if NotWalledShares.Unwalled() {
		t.Error("a vat that shares a host resource still runs inside its wall")
	}
}

func TestEveryEgressWordHasBothLanguages(t *testing.T) {
	for _, e := range AllEgress() {
		if e == EgressNone {
			if e.In("en") != "" || e.With("es", "x") != "" {
				t.Errorf("EgressNone says %q / %q; want nothing", e.In("en"), e.With("es", "x"))
			}
			continue
		}
		en, es := e.In("en"), e.In("es")
		if en == "" || es == "" || en == es {
			t.Errorf("egress word %d: en %q, es %q", e, en, es)
		}
		if got := e.With("en", "why"); got != en+" (why)" {
			t.Errorf("With = %q", got)
		}
	}
}
