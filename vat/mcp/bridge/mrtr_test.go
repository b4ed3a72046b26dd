package bridge

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"toybox/vat/mcp"
	"toybox/vat/mcp/mcptest"
)

// inputRequired is what a test reads of an InputRequiredResult.
type inputRequired struct {
	ResultType    string `json:"resultType"`
	InputRequests map[string]struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	} `json:"inputRequests"`
	RequestState string `json:"requestState"`
}

// modernCall is a stateless tools/call of tool by a client declaring caps,
// with extra params (a retry's inputResponses and requestState).
func modernCall(id int, tool string, caps map[string]any, extra map[string]any) []byte {
	params := map[string]any{"name": tool, "arguments": map[string]any{}, "_meta": map[string]any{
		mcp.MetaProtocolVersion: mcp.ModernVersion, mcp.MetaClientCapabilities: caps,
	}}
	for k, v := range extra {
		params[k] = v
	}
	return mcptest.Request(id, "tools/call", params)
}

// TestMRTR: a stateless client of a 2025-only vat (the fake) is asked
// for the vat's sampling, elicitation and roots requests as
// InputRequiredResults; its retry answers the vat and gets the call's
// result. A state used before, altered, of another principal or expired
// gets -32602; a capability the client did not declare gets -32021.
func TestMRTR(t *testing.T) {
	_, srv := newBridge(t, Config{})
	ctx := context.Background()
	alice, bob := client(srv, "alice"), client(srv, "bob")
	all := map[string]any{"sampling": map[string]any{}, "elicitation": map[string]any{}, "roots": map[string]any{}}

	// ask calls tool and returns the InputRequiredResult's one key and state.
	ask := func(c *mcptest.Client, id int, tool, method string) (string, string) {
		t.Helper()
		r, err := c.Post(ctx, modernCall(id, tool, all, nil), modernHeaders("tools/call", tool)...)
		if err != nil || r.Status != http.StatusOK {
			t.Fatalf("%s: %v %+v", tool, err, r)
		}
		var ir inputRequired
		_ = json.Unmarshal(r.Final()["result"], &ir)
		if ir.ResultType != "input_required" || len(ir.InputRequests) != 1 || ir.RequestState == "" {
			t.Fatalf("%s: %s; want one input request", tool, r.Final()["result"])
		}
		for k, v := range ir.InputRequests {
			if v.Method != method {
				t.Fatalf("%s asked %s; want %s", tool, v.Method, method)
			}
			return k, ir.RequestState
		}
		return "", ""
	}
	retry := func(c *mcptest.Client, id int, tool, key, state string, answer any) *mcptest.Resp {
		t.Helper()
		body := modernCall(id, tool, all, map[string]any{"inputResponses": map[string]any{key: answer}, "requestState": state})
		r, err := c.Post(ctx, body, modernHeaders("tools/call", tool)...)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	sampled := map[string]any{"role": "assistant", "content": map[string]any{"type": "text", "text": "from the client"}, "model": "m"}

	key, state := ask(alice, 1, "sample", "sampling/createMessage")
	r := retry(alice, 2, "sample", key, state, sampled)
	if r.Text() != "sampled: from the client" || !strings.Contains(string(r.Final()["result"]), `"resultType":"complete"`) || string(r.Final()["id"]) != "2" {
		t.Fatalf("the retry: %s; want the vat's result under the retry's id", r.Body)
	}
	// Used once: the same state again is refused.
	if r := retry(alice, 3, "sample", key, state, sampled); r.Status != http.StatusBadRequest || !strings.Contains(string(r.Final()["error"]), "-32602") {
		t.Errorf("a state used twice: %d %s; want 400 -32602", r.Status, r.Body)
	}

	key, state = ask(alice, 4, "elicit", "elicitation/create")
	// Altered, and another principal's: refused, and the call still waits.
	tampered := state[:len(state)-2] + "AA"
	if tampered == state {
		tampered = state[:len(state)-2] + "BB"
	}
	if r := retry(alice, 5, "elicit", key, tampered, nil); r.Status != http.StatusBadRequest || !strings.Contains(string(r.Final()["error"]), "-32602") {
		t.Errorf("an altered state: %d %s; want 400 -32602", r.Status, r.Body)
	}
	if r := retry(bob, 6, "elicit", key, state, map[string]any{"action": "accept"}); r.Status != http.StatusBadRequest {
		t.Errorf("alice's state used by bob: %d %s; want 400", r.Status, r.Body)
	}
	r = retry(alice, 7, "elicit", key, state, map[string]any{"action": "accept", "content": map[string]any{"name": "ann"}})
	if !strings.Contains(r.Text(), `"name":"ann"`) {
		t.Errorf("elicitation retry: %s", r.Body)
	}

	key, state = ask(alice, 8, "roots", "roots/list")
	if r := retry(alice, 9, "roots", key, state, map[string]any{"roots": []any{}}); !strings.HasPrefix(r.Text(), "roots: ") {
		t.Errorf("roots retry: %s", r.Body)
	}

	// A capability the client did not declare: -32021 to the client.
	r, err := alice.Post(ctx, modernCall(10, "sample", map[string]any{}, nil), modernHeaders("tools/call", "sample")...)
	if err != nil || r.Status != http.StatusBadRequest || !strings.Contains(string(r.Final()["error"]), "-32021") {
		t.Errorf("sampling without the capability: %v %d %s; want 400 -32021", err, r.Status, r.Body)
	}
	if r, err := alice.Post(ctx, modernCall(11, "echo", all, nil), modernHeaders("tools/call", "echo")...); err != nil || r.Final()["error"] != nil {
		t.Errorf("the process after a refusal: %v %s", err, r.Body)
	}
}

// TestMRTRExpires: a state past its call's timeout is refused. The
// timeout also bounds the spawn and initialize of the process, so it is
// not cut so short that a loaded machine misses it.
func TestMRTRExpires(t *testing.T) {
	const timeout = 3 * time.Second
	_, srv := newBridge(t, Config{RequestTimeout: timeout})
	ctx := context.Background()
	c := client(srv, "alice")
	caps := map[string]any{"sampling": map[string]any{}}
	r, err := c.Post(ctx, modernCall(1, "sample", caps, nil), modernHeaders("tools/call", "sample")...)
	if err != nil {
		t.Fatal(err)
	}
	var ir inputRequired
	_ = json.Unmarshal(r.Final()["result"], &ir)
	if ir.RequestState == "" {
		t.Fatalf("no input request: %s", r.Body)
	}
	time.Sleep(timeout + 200*time.Millisecond)
	var key string
	for k := range ir.InputRequests {
		key = k
	}
	body := modernCall(2, "sample", caps, map[string]any{"inputResponses": map[string]any{key: map[string]any{"role": "assistant"}}, "requestState": ir.RequestState})
	r, err = c.Post(ctx, body, modernHeaders("tools/call", "sample")...)
	if err != nil || r.Status != http.StatusBadRequest || !strings.Contains(string(r.Final()["error"]), "expired") {
		t.Errorf("an expired state: %v %d %s; want 400, expired", err, r.Status, r.Body)
	}
}
