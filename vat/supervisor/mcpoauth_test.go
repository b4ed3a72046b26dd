package supervisor

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"toybox/tests/testenv"
)

// TestMCPOAuthClient: the Go SDK's OAuth client completes discovery and a
// tool call through toybox against examples/mcp-oauth, a vat that is its
// own resource server (mcp.auth "vat", R45): the 401 and the vat's
// metadata cross the edge, the metadata names the URL the client used
// (the vat learns it as $MCP_PUBLIC_URL), the authorization server is
// asked for a token of that audience (RFC 8707), and the bearer token
// reaches the vat, which checks it.
func TestMCPOAuthClient(t *testing.T) {
	dir, err := os.MkdirTemp("", "tbx-mcpoauth-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	_ = os.Chmod(dir, 0o755)
	exe := filepath.Join(dir, "mcp-oauth")
	if out, err := exec.Command("go", "build", "-o", exe, "toybox/examples/mcp-oauth").CombinedOutput(); err != nil {
		t.Fatalf("go build examples/mcp-oauth: %v\n%s", err, out)
	}

	// The public listener first: its URL is the supervisor's PublicURL.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + l.Addr().String()
	s, st, _ := unwalledWith(t, Config{
		StopGrace: time.Second, ReadyTimeout: 10 * time.Second, PublicURL: base,
		Logger: slog.New(slog.NewJSONHandler(&testenv.Buffer{}, nil)),
	})
	front := httptest.NewUnstartedServer(s.PublicHandler())
	front.Listener = l
	front.Start()
	defer front.Close()

	// The authorization server: the test's own, on loopback (only the
	// client reaches it; the vat checks tokens offline).
	key := []byte("the authorization server's signing key")
	var mu sync.Mutex
	var resources []string
	var as *httptest.Server
	as = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/oauth-authorization-server":
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{
				"issuer": as.URL, "authorization_endpoint": as.URL + "/authorize", "token_endpoint": as.URL + "/token",
				"response_types_supported": []string{"code"}, "code_challenge_methods_supported": []string{"S256"},
				"token_endpoint_auth_methods_supported": []string{"client_secret_post"},
			})
		case "/authorize":
			q := r.URL.Query()
			mu.Lock()
			resources = append(resources, q.Get("resource"))
			mu.Unlock()
			http.Redirect(w, r, q.Get("redirect_uri")+"?code=c-"+url.QueryEscape(q.Get("resource"))+"&state="+url.QueryEscape(q.Get("state")), http.StatusFound)
		case "/token":
			_ = r.ParseForm()
			aud := r.PostForm.Get("resource")
			if r.PostForm.Get("client_id") != "toybox-test" || r.PostForm.Get("code") != "c-"+aud || r.PostForm.Get("code_verifier") == "" {
				http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
				return
			}
			exp := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
			h := hmac.New(sha256.New, key)
			h.Write([]byte(aud + "|" + exp))
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"access_token": exp + "." + base64.RawURLEncoding.EncodeToString(h.Sum(nil)), "token_type": "Bearer", "expires_in": 3600})
		default:
			http.NotFound(w, r)
		}
	}))
	defer as.Close()

	bundle := bundleFile(t, `{"command":["./mcp-oauth"],"env":["OAUTH_ISSUER","OAUTH_TOKEN_KEY"],"mcp":{"transport":"http","auth":"vat"}}`, "mcp-oauth", exe)
	stat, _, err := s.Install(InstallRequest{ID: "notes", Code: storeFile(t, st, bundle), Env: map[string]string{"OAUTH_ISSUER": as.URL, "OAUTH_TOKEN_KEY": string(key)}})
	if err != nil {
		t.Fatal(err)
	}
	endpoint := base + "/notes/mcp"
	if stat.MCP == nil || stat.MCP.PublicURL != endpoint {
		t.Fatalf("status MCP %+v; want public_url %s", stat.MCP, endpoint)
	}

	// Without a token: the vat's own 401, through the edge.
	resp, err := http.Post(endpoint, "application/json", bytes.NewBufferString(initBody))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("no token: %d %q; want the vat's 401 with its challenge", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	handler, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		PreregisteredClient: &oauthex.ClientCredentials{ClientID: "toybox-test", ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: "s"}},
		RedirectURL:         "http://127.0.0.1/callback",
		AuthorizationCodeFetcher: func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			// The user's browser, approving at once.
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, args.URL, nil)
			resp, err := noRedirect.Do(req)
			if err != nil {
				return nil, err
			}
			resp.Body.Close()
			loc, err := url.Parse(resp.Header.Get("Location"))
			if err != nil {
				return nil, err
			}
			return &auth.AuthorizationResult{Code: loc.Query().Get("code"), State: loc.Query().Get("state")}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := sdk.NewClient(&sdk.Implementation{Name: "toybox-test", Version: "1"}, nil)
	cs, err := cl.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: endpoint, OAuthHandler: handler, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("the SDK's OAuth client through toybox: %v", err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "authorized"}})
	if err != nil || res.IsError || len(res.Content) == 0 {
		t.Fatalf("echo: %v %+v", err, res)
	}
	if tc, ok := res.Content[0].(*sdk.TextContent); !ok || tc.Text != "authorized" {
		t.Errorf("echo = %+v; want authorized", res.Content[0])
	}
	mu.Lock()
	defer mu.Unlock()
	if len(resources) != 1 || resources[0] != endpoint {
		t.Errorf("the authorization server was asked for resources %q; want [%s] (the vat's metadata names the URL the client used)", resources, endpoint)
	}
}
