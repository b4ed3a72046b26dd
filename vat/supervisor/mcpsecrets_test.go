package supervisor

import (
	"errors"
	"strings"
	"testing"

	"toybox/vat/manifest"
)

// TestCheckSecrets: a token carries secrets only where no process of it
// serves another principal, and only for names its vat's manifest
// declares.
func TestCheckSecrets(t *testing.T) {
	stdio := &manifest.MCP{Transport: manifest.TransportStdio}
	declared := []string{"API_KEY", "REGION"}
	big := strings.Repeat("x", maxSecretsBytes)
	tests := []struct {
		name    string
		cfg     *manifest.MCP
		secrets map[string]string
		why     string // "" for allowed
	}{
		{"none", &manifest.MCP{Transport: manifest.TransportHTTP}, nil, ""},
		{"declared", stdio, map[string]string{"API_KEY": "k"}, ""},
		{"shared", &manifest.MCP{Transport: manifest.TransportStdio, Mode: manifest.ModeShared}, map[string]string{"REGION": "eu"}, ""},
		{"http vat", &manifest.MCP{Transport: manifest.TransportHTTP}, map[string]string{"API_KEY": "k"}, "serves every client"},
		{"single", &manifest.MCP{Transport: manifest.TransportStdio, Mode: manifest.ModeSingle}, map[string]string{"API_KEY": "k"}, "one process for everyone"},
		{"undeclared", stdio, map[string]string{"PATH": "/evil"}, "not one of the variables"},
		{"NUL", stdio, map[string]string{"API_KEY": "a\x00b"}, "NUL"},
		{"too big", stdio, map[string]string{"API_KEY": big}, "bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkSecrets("v", tt.cfg, declared, tt.secrets)
			switch {
			case tt.why == "" && err != nil:
				t.Errorf("checkSecrets = %v; want nil", err)
			case tt.why != "" && (err == nil || !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tt.why)):
				t.Errorf("checkSecrets = %v; want ErrBadInput saying %q", err, tt.why)
			}
		})
	}
}
