package grant

import (
	"testing"

	"toybox/labels"
)

// common says what a union of members reaches at most: a label all agree
// on stays; one they differ on goes (every value), origin included — a
// union with a typed member reaches what a manifest-only one does not.
func TestCommonIsAtMost(t *testing.T) {
	typed := labels.Set{Host: "db.lan", Port: 5432, Vat: "alice"}
	written := labels.Set{Host: "db.lan", Port: 5432, Vat: "alice", Origin: labels.OriginManifest}
	other := labels.Set{Host: "cache.lan", Port: 5432, Vat: "alice", Origin: labels.OriginManifest}
	for _, tc := range []struct {
		name string
		ms   []labels.Set
		want labels.Set
	}{
		{"one member", []labels.Set{written}, written},
		{"typed and written", []labels.Set{written, typed}, typed},
		{"two written", []labels.Set{written, other}, labels.Set{Port: 5432, Vat: "alice", Origin: labels.OriginManifest}},
		// {"scheme":"https"} alone would say port 443 only.
		{"https on two ports", []labels.Set{{Scheme: "https", Host: "a.example", Port: 443}, {Scheme: "https", Host: "a.example", Port: 8443}}, labels.Set{Host: "a.example"}},
		{"https on one port", []labels.Set{{Scheme: "https", Host: "a.example", Port: 443}, {Scheme: "https", Host: "b.example", Port: 443}}, labels.Set{Scheme: "https", Port: 443}},
		{"tcp on two ports", []labels.Set{{Scheme: "tcp", Port: 22}, {Scheme: "tcp", Port: 5432}}, labels.Set{Scheme: "tcp"}},
	} {
		if got := common(tc.ms); got != tc.want {
			t.Errorf("%s: common = %+v; want %+v", tc.name, got, tc.want)
		}
	}
}
