package bridge

import (
	"context"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"toybox/vat/mcp"
	"toybox/vat/mcp/mcptest"
)

// fakeEnviron is the fake's "env" tool: its process's environment,
// sorted, one variable a line.
func fakeEnviron() string {
	env := os.Environ()
	slices.Sort(env)
	return strings.Join(env, "\n")
}

// envOf calls the fake's env tool on c: its process's environment.
// modern makes it a stateless (2026-07-28) request.
func envOf(t *testing.T, c *mcptest.Client, modern bool) []string {
	t.Helper()
	body, hdr := mcptest.Tool(7, "env", nil), []string(nil)
	if modern {
		body = mcptest.Request(7, "tools/call", map[string]any{"name": "env", "arguments": map[string]any{}, "_meta": modernMeta})
		hdr = modernHeaders("tools/call", "env")
	}
	r, err := c.Post(context.Background(), body, hdr...)
	if err != nil || r.Text() == "" {
		t.Fatalf("env: %v %+v", err, r)
	}
	return strings.Split(r.Text(), "\n")
}

// without returns env without the variables named in names.
func without(env []string, names ...string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(names, k)
	})
}

// TestPrincipalSecrets (R22): a principal's secrets are set in its own
// processes alone, over the vat's value of the same name; the processes
// of two principals differ only in them. The spare, started before anyone
// asked, never serves a principal with secrets.
func TestPrincipalSecrets(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]map[string]string{
		"alice": {"API_KEY": "alice-secret", "ALICE_ONLY": "a"},
		"bob":   {"API_KEY": "bob-secret"},
		"carol": nil,
	}
	for _, mode := range []Mode{ModeSession, ModeShared, ModeSingle} {
		t.Run(string(mode), func(t *testing.T) {
			b, err := New(Config{Mode: mode, Spawner: ExecSpawner{Argv: []string{self}, Env: []string{fakeEnv + "=1", "API_KEY=vat-default"}}})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(b)
			t.Cleanup(func() { srv.Close(); b.Close() })
			ctx := context.Background()
			got := map[string][]string{}
			for _, who := range []string{"alice", "bob", "carol"} {
				c := client(srv, who)
				c.PrincipalEnv = mcp.EncodeEnv(secrets[who])
				if err := c.Initialize(ctx, "", nil); err != nil {
					t.Fatal(err)
				}
				got[who] = envOf(t, c, false)
				// A stateless request of the same principal: its
				// stateless process.
				sl := client(srv, who)
				sl.PrincipalEnv = c.PrincipalEnv
				if modern := envOf(t, sl, true); mode != ModeSingle && !slices.Equal(modern, got[who]) {
					t.Errorf("%s's stateless process has %q; its session's %q", who, modern, got[who])
				}
			}
			for who, env := range got {
				for other, s := range secrets {
					for k, v := range s {
						has := slices.Contains(env, k+"="+v)
						if want := other == who && mode != ModeSingle; has != want {
							t.Errorf("%s's process has %s=%s (%s's): %v; want %v", who, k, v, other, has, want)
						}
					}
				}
			}
			if mode == ModeSingle {
				// One process for everyone holds no one's secrets.
				if !slices.Contains(got["alice"], "API_KEY=vat-default") {
					t.Errorf("single mode: alice's process lacks the vat's API_KEY: %q", got["alice"])
				}
				return
			}
			if !slices.Contains(got["carol"], "API_KEY=vat-default") || slices.Contains(got["alice"], "API_KEY=vat-default") {
				t.Errorf("API_KEY: carol's %q, alice's %q; want the vat's for carol, replaced for alice", got["carol"], got["alice"])
			}
			base := without(got["carol"], "API_KEY")
			for _, who := range []string{"alice", "bob"} {
				if rest := without(got[who], "API_KEY", "ALICE_ONLY"); !slices.Equal(rest, base) {
					t.Errorf("%s's environment differs from carol's beyond its secrets:\n%q\n%q", who, rest, base)
				}
			}
		})
	}
}

// TestPrincipalSecretsRefused: a Toybox-Principal-Env that is not a
// principal's environment is refused whole, before any process starts.
func TestPrincipalSecretsRefused(t *testing.T) {
	_, srv := newBridge(t, Config{Mode: ModeSession, NoSpare: true})
	for _, bad := range []string{"%%%", mcp.EncodeEnv(map[string]string{"LD_PRELOAD=x": "y"}), mcp.EncodeEnv(map[string]string{"K": "a\x00b"})} {
		c := client(srv, "alice")
		c.PrincipalEnv = bad
		if err := c.Initialize(context.Background(), "", nil); err == nil {
			t.Errorf("initialize with Toybox-Principal-Env %q: no error; want 400", bad)
		}
	}
}
