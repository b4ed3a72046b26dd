package labels

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

// refusalTests are errors as the refusal's readers meet them: made here,
// wrapped by a caller, or flattened to text by a Cap'n Proto connection.
var refusalTests = []struct {
	name   string
	err    error
	reason string
	ok     bool
}{
	{"made", Refuse("port 22 not granted"), "port 22 not granted", true},
	{"formatted", Refusef("port %d not granted", 22), "port 22 not granted", true},
	{"wrapped", fmt.Errorf("relaying: %w", Refuse("example.net resolves to a private address")), "example.net resolves to a private address", true},
	{"over the wire", errors.New("remote error: egress refused: egress to example.org not granted"), "egress to example.org not granted", true},
	{"empty reason", Refuse(""), "", true},
	{"a reason that quotes the prefix", Refuse("host \"egress refused: x\" is not a name"), "host \"egress refused: x\" is not a name", true},
	{"not a refusal", errors.New("name resolution failed: no such host"), "", false},
	{"the prefix without its space", errors.New("egress refused:x"), "", false},
	{"nil", nil, "", false},
}

func TestRefusalReason(t *testing.T) {
	for _, tt := range refusalTests {
		t.Run(tt.name, func(t *testing.T) {
			reason, ok := RefusalReason(tt.err)
			if reason != tt.reason || ok != tt.ok {
				t.Errorf("RefusalReason(%v) = %q, %v; want %q, %v", tt.err, reason, ok, tt.reason, tt.ok)
			}
			if tt.err == nil {
				return
			}
			reason, ok = RefusalText(tt.err.Error())
			if reason != tt.reason || ok != tt.ok {
				t.Errorf("RefusalText(%q) = %q, %v; want %q, %v", tt.err.Error(), reason, ok, tt.reason, tt.ok)
			}
		})
	}
}

// TestRefusalText pins the text clients and tests read: the prefix, then
// the reason, byte for byte.
func TestRefusalText(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"Refuse", Refuse("scheme tcp not granted"), "egress refused: scheme tcp not granted"},
		{"Refusef", Refusef("the ClientHello names %q, not %s", "a.test", "b.test"), `egress refused: the ClientHello names "a.test", not b.test`},
		{"Refusef with %w", Refusef("the vat's grant no longer admits this handle (%w)", io.EOF), "egress refused: the vat's grant no longer admits this handle (EOF)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q; want %q", got, tt.want)
			}
			if !errors.Is(tt.err, ErrRefused) {
				t.Errorf("errors.Is(%v, ErrRefused) = false; want true", tt.err)
			}
		})
	}
}

// TestRefusefWraps: an error given with %w stays reachable, so a caller
// can still tell a closed grant from a refusal's words.
func TestRefusefWraps(t *testing.T) {
	err := fmt.Errorf("calling: %w", Refusef("reading the headers: %w", io.ErrUnexpectedEOF))
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("errors.Is(%v, io.ErrUnexpectedEOF) = false; want true", err)
	}
	if !errors.Is(err, ErrRefused) {
		t.Errorf("errors.Is(%v, ErrRefused) = false; want true", err)
	}
	if r, ok := errors.AsType[*Refusal](err); !ok || r.Reason != "reading the headers: unexpected EOF" {
		t.Errorf("errors.AsType[*Refusal](%v) = %v, %v; want the refusal", err, r, ok)
	}
	if errors.Is(errors.New("egress refused"), ErrRefused) {
		t.Error("a look-alike error matches ErrRefused")
	}
}

// FuzzRefusalText: every reason survives the trip through the text, also
// behind whatever words a transport puts in front.
func FuzzRefusalText(f *testing.F) {
	for _, tt := range refusalTests {
		if tt.err != nil {
			f.Add("", tt.err.Error())
		}
	}
	f.Add("remote error: ", "egress to example.org not granted")
	f.Fuzz(func(t *testing.T, front, reason string) {
		msg := front + Refuse(reason).Error()
		got, ok := RefusalText(msg)
		if !ok {
			t.Fatalf("RefusalText(%q) found no refusal", msg)
		}
		if _, earlier := RefusalText(front); !earlier && got != reason {
			t.Errorf("RefusalText(%q) = %q; want %q", msg, got, reason)
		}
	})
}
