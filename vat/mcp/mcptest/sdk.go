package mcptest

import (
	"context"
	"net/http"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// principalTransport sets the principal header on every request, as the
// supervisor does for its clients.
type principalTransport struct {
	base      http.RoundTripper
	principal string
}

func (t principalTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Toybox-Principal", t.principal)
	return t.base.RoundTrip(r)
}

// SDK connects the Go SDK's client (v1.7.0: it asks server/discover
// first and speaks 2026-07-28 when that is answered) to c's endpoint, as
// c's principal.
func (c *Client) SDK(ctx context.Context, opts *sdk.ClientOptions) (*sdk.ClientSession, error) {
	base := c.HTTP.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	hc := &http.Client{Transport: principalTransport{base: base, principal: c.Principal}}
	cl := sdk.NewClient(&sdk.Implementation{Name: "toybox-test", Version: "1"}, opts)
	return cl.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: c.URL, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
}
