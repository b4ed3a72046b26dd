// Command mcp-oauth is an MCP server vat that is its own OAuth resource
// server.
//
// Its manifest says "mcp": {"transport": "http", "auth": "vat"}. So toybox
// checks no token for it and passes the client's Authorization through.
//
// It serves Streamable HTTP at /mcp on $TOYBOX_LISTEN, behind the Go SDK's
// bearer check, and its protected-resource metadata (RFC 9728) at
// /.well-known/oauth-protected-resource/mcp, whose resource is
// $MCP_PUBLIC_URL: the URL toybox says its clients use.
//
// The owner gives it, as env:
//
//	OAUTH_ISSUER     the authorization server clients get tokens from
//	OAUTH_TOKEN_KEY  the key that server signs its access tokens with
//
// A token is "<expiry unix seconds>.<base64url HMAC-SHA256(key,
// audience|expiry)>", its audience this server's public URL (RFC 8707):
// checked here with no network, as a vat with no way out must.
package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"log"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"toybox/examples/internal/mcptools"
)

func sign(key []byte, audience, exp string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(audience + "|" + exp))
	return h.Sum(nil)
}

// verifier accepts the tokens of key for audience.
func verifier(key []byte, audience string) auth.TokenVerifier {
	return func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		exp, sum, ok := strings.Cut(token, ".")
		mac, err := base64.RawURLEncoding.DecodeString(sum)
		if !ok || err != nil || !hmac.Equal(mac, sign(key, audience, exp)) {
			return nil, auth.ErrInvalidToken
		}
		secs, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{Expiration: time.Unix(secs, 0)}, nil
	}
}

type echoArgs struct {
	Text string `json:"text"`
}

func echo(_ context.Context, _ *mcp.CallToolRequest, in echoArgs) (*mcp.CallToolResult, any, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
}

func main() {
	sock, public := os.Getenv("TOYBOX_LISTEN"), os.Getenv("MCP_PUBLIC_URL")
	issuer, key := os.Getenv("OAUTH_ISSUER"), os.Getenv("OAUTH_TOKEN_KEY")
	if sock == "" || public == "" || issuer == "" || key == "" {
		log.Fatal("mcp-oauth needs $TOYBOX_LISTEN and $MCP_PUBLIC_URL (from toybox), $OAUTH_ISSUER and $OAUTH_TOKEN_KEY (from its owner)")
	}
	pu, err := url.Parse(public)
	if err != nil {
		log.Fatalf("MCP_PUBLIC_URL: %v", err)
	}
	// RFC 9728 §3.1: the metadata's URL is the resource's with the
	// well-known prefix inserted before its path.
	prm := pu.Scheme + "://" + pu.Host + "/.well-known/oauth-protected-resource" + pu.Path

	server := mcp.NewServer(&mcp.Implementation{Name: "toybox-example-mcp-oauth", Version: "1.0.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "echo", Description: "Answers its text"}, echo)
	mux := http.NewServeMux()
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	mux.Handle("/mcp", auth.RequireBearerToken(verifier([]byte(key), public), &auth.RequireBearerTokenOptions{ResourceMetadataURL: prm})(mcpHandler))
	mux.Handle("/.well-known/oauth-protected-resource/mcp", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: public, AuthorizationServers: []string{issuer}, BearerMethodsSupported: []string{"header"},
	}))
	mcptools.ServeUnix(sock, mux)
}
