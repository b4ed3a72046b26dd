package labels_test

import (
	"fmt"

	"toybox/labels"
)

// A supervisor narrows its switchboard handle to a vat's grant, then asks
// whether the narrowed handle admits a request.
func Example() {
	root := labels.Set{Network: labels.NetworkLocal}
	grant, err := labels.ParseGrant(`{"host":"API.Example.com","scheme":"https"}`)
	if err != nil {
		fmt.Println(err)
		return
	}
	h, err := labels.Constrain(root, grant[0])
	if err != nil {
		fmt.Println(err)
		return
	}
	h, _ = labels.Constrain(h, labels.Set{Vat: "weather", Network: labels.NetworkPublic})
	fmt.Println(h)

	for _, raw := range []string{"wss://api.example.com/feed", "https://api.example.com:8443/", "https://example.org/", "http://api.example.com/"} {
		r, err := labels.ParseURL(raw)
		if err != nil {
			fmt.Println(err)
			continue
		}
		r.Class = labels.NetworkPublic
		d := h.Admit(r)
		fmt.Println(d.Allow, d.Reason)
	}
	// Output:
	// {"host":"api.example.com","network":"public","port":443,"scheme":"https","vat":"weather"}
	// true granted by {"host":"api.example.com","network":"public","port":443,"scheme":"https","vat":"weather"}
	// false port 8443 not granted
	// false egress to example.org not granted
	// false scheme http not granted
}

func ExampleParseGrant() {
	for _, g := range []string{
		`example.com:8443`,
		`[::1]:80`,
		`[{"host":"a.example","port":443},{"scheme":"tcp","host":"db.example","port":"5432"}]`,
		`{"host":"*.example.com"}`,
		`{"host":"a.example","vat":"me"}`,
		`{"host":"a.example","prot":443}`,
	} {
		sets, err := labels.ParseGrant(g)
		fmt.Println(sets, err)
	}
	// Output:
	// [{"host":"example.com","port":8443}] <nil>
	// [{"host":"::1","port":80}] <nil>
	// [{"host":"a.example","port":443} {"host":"db.example","port":5432,"scheme":"tcp"}] <nil>
	// [] bad label: wildcard host "*.example.com" not allowed
	// [] bad label: grant names vat "me": vat is set only by the supervisor, never by a grant
	// [] bad label: unknown key "prot" (known: host, network, origin, port, scheme, vat)
}
