package words

// Egress is how a running vat's programs get out of its wall.
type Egress int

// The egress words.
const (
	// EgressNone: the vat has no way out (or does not run walled).
	EgressNone Egress = iota
	// EgressTransparent: every connect() its programs make is answered
	// through its grant (toybox-entry's seccomp notifier), and the
	// CONNECT proxy serves those that use it.
	EgressTransparent
	// EgressProxyOnly: only programs that use HTTP(S)_PROXY get out; its
	// words name why (With).
	EgressProxyOnly
	// EgressPending: the wall was asked for transparent egress and its
	// toybox-entry has not yet said whether the kernel gave it; nothing
	// is claimed until it does.
	EgressPending
)

var egressTable = map[Egress]pair{
	EgressNone:        {"", ""},
	EgressTransparent: {"transparent: every connection goes through its grant", "transparente: cada conexión pasa por su permiso"},
	EgressProxyOnly:   {"proxy only: only programs that use HTTP(S)_PROXY get out", "solo proxy: solo salen los programas que usan HTTP(S)_PROXY"},
	EgressPending:     {"not known yet: its wall has not said whether every connection goes through its grant", "aún no se sabe: su muro no ha dicho si cada conexión pasa por su permiso"},
}

// In returns the word in lang ("en" or "es"; anything else is English).
func (e Egress) In(lang string) string {
	p := egressTable[e]
	if lang == "es" {
		return p.es
	}
	return p.en
}

// With returns the word in lang followed by detail in parentheses; just
// the word when detail is empty.
func (e Egress) With(lang, detail string) string {
	if detail == "" || e == EgressNone {
		return e.In(lang)
	}
	return e.In(lang) + " (" + detail + ")"
}

// AllEgress lists every egress word, for tests and documentation.
func AllEgress() []Egress {
	return []Egress{EgressNone, EgressTransparent, EgressProxyOnly, EgressPending}
}
