package grant

import (
	"log/slog"
	"strings"
	"testing"

	"toybox/labels"
	"toybox/vat/tokens"
)

// A union whose TLS-only member is not the first: a tcp request to that
// member's address is refused for its scheme, in the words toybox-entry
// reads as "ask again as TLS" (labels.SchemeRefused), not with the first
// member's "port not granted", which left CONNECT to a listed
// https://host:8443 refused whenever another grant came first.
func TestCandidatesSayWhenOnlyTheSchemeIsRefused(t *testing.T) {
	h := &handleServer{v: &Vat{log: slog.New(slog.DiscardHandler), refusals: tokens.NewRecords(refusalLogRate, refusalLogBurst), members: []labels.Set{
		{Host: "127.0.0.1", Port: 8000, Vat: "alice"},
		{Scheme: "https", Host: "127.0.0.1", Port: 8443, Vat: "alice"},
	}}}
	_, err := h.candidates("connect", labels.Request{Scheme: "tcp", Host: "127.0.0.1", Port: 8443})
	if err == nil || !strings.Contains(err.Error(), labels.SchemeRefused("tcp")) {
		t.Fatalf("tcp to the https-only member: %v; want a refusal naming %q", err, labels.SchemeRefused("tcp"))
	}
	if ms, err := h.candidates("connect", labels.Request{Scheme: "https", Host: "127.0.0.1", Port: 8443}); err != nil || len(ms) != 1 {
		t.Fatalf("https to the https-only member: %v, %v; want it admitted by one member", ms, err)
	}
	// No member refuses for the scheme alone: the first member's words.
	_, err = h.candidates("connect", labels.Request{Scheme: "tcp", Host: "127.0.0.1", Port: 9000})
	if err == nil || err.Error() != "egress refused: port 9000 not granted" {
		t.Fatalf("tcp to an ungranted port: %v; want the first member's refusal", err)
	}
}
