package packages

import (
	"errors"
	"strings"
	"testing"
)

func TestParseServerJSON(t *testing.T) {
	const reg = "https://registry.npmjs.org"
	doc := func(pkg string) string {
		return `{"$schema":"https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json",
			"name":"io.github.owner/weather","description":"d","version":"1.0.2","packages":[` + pkg + `]}`
	}
	tests := []struct {
		name, in, err string
		want          string // the spec
	}{
		{"npm", doc(`{"registryType":"npm","registryBaseUrl":"https://registry.npmjs.org","identifier":"@owner/weather","version":"1.0.2","transport":{"type":"stdio"},
			"runtimeArguments":[{"type":"named","name":"-y"}],"packageArguments":[{"type":"positional","value":"serve"}],
			"environmentVariables":[{"name":"API_KEY","isRequired":true,"isSecret":true},{"name":"UNITS","default":"metric"}]}`), "", "npm:@owner/weather@1.0.2"},
		{"oci first, npm second", doc(`{"registryType":"oci","identifier":"x","version":"1.0.0","transport":{"type":"stdio"}},{"registryType":"npm","identifier":"w","version":"2.0.0","transport":{"type":"stdio"}}`), "", "npm:w@2.0.0"},
		{"unknown registry type", doc(`{"registryType":"apt","identifier":"x","version":"1.0.0","transport":{"type":"stdio"}}`), "packages[0].registryType", ""},
		{"a range", doc(`{"registryType":"npm","identifier":"x","version":"^1.0.0","transport":{"type":"stdio"}}`), "packages[0].version", ""},
		{"latest", doc(`{"registryType":"npm","identifier":"x","version":"latest","transport":{"type":"stdio"}}`), "packages[0].version", ""},
		{"top latest", strings.Replace(doc(`{"registryType":"npm","identifier":"x","version":"1.0.0","transport":{"type":"stdio"}}`), `"1.0.2"`, `"latest"`, 1), "version:", ""},
		{"mcpb without hash", doc(`{"registryType":"mcpb","identifier":"https://x/y.mcpb","version":"1.0.0","transport":{"type":"stdio"}}`), "packages[0].fileSha256", ""},
		{"another registry", doc(`{"registryType":"npm","registryBaseUrl":"https://evil.example","identifier":"x","version":"1.0.0","transport":{"type":"stdio"}}`), "packages[0].registryBaseUrl", ""},
		{"http transport", doc(`{"registryType":"npm","identifier":"x","version":"1.0.0","transport":{"type":"streamable-http","url":"http://localhost:{port}/mcp"}}`), "packages[0].transport.type", ""},
		{"a source-changing runtime argument", doc(`{"registryType":"npm","identifier":"x","version":"1.0.0","transport":{"type":"stdio"},"runtimeArguments":[{"type":"named","name":"--package","value":"evil"}]}`), "packages[0].runtimeArguments", ""},
		{"variables", doc(`{"registryType":"npm","identifier":"x","version":"1.0.0","transport":{"type":"stdio"},"packageArguments":[{"type":"positional","value":"--dir={dir}"}]}`), "packages[0].packageArguments[0]", ""},
		{"bad name", strings.Replace(doc(`{"registryType":"npm","identifier":"x","version":"1.0.0","transport":{"type":"stdio"}}`), "io.github.owner/weather", "weather", 1), "name:", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sj, err := ParseServerJSON([]byte(tt.in), reg)
			if tt.err != "" {
				if !errors.Is(err, ErrBadServerJSON) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseServerJSON = %v; want an error naming %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := sj.Spec.String(); got != tt.want {
				t.Errorf("spec = %s; want %s", got, tt.want)
			}
		})
	}
	sj, err := ParseServerJSON([]byte(tests[0].in), reg)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(sj.Spec.Args, " ") != "serve" || strings.Join(sj.Env, ",") != "API_KEY,UNITS" || sj.Defaults["UNITS"] != "metric" || strings.Join(sj.Required, ",") != "API_KEY" {
		t.Errorf("args %v env %v required %v defaults %v", sj.Spec.Args, sj.Env, sj.Required, sj.Defaults)
	}
}
