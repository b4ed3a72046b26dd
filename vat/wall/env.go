package wall

import (
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// RuntimeEnv is what every wall's environment holds for common runtimes
// under a supervisor, unless the vat's manifest declares the key (the
// owner's value wins); so is PYTHONPYCACHEPREFIX, below the data folder.
// Each changes behaviour for the better only.
var RuntimeEnv = map[string]string{
	// Python block-buffers stdout to a pipe: the vat's log would show
	// nothing of a print until 8 KiB had gathered, or the app ended.
	"PYTHONUNBUFFERED": "1",
}

// env builds the app's environment: nothing is inherited but the allowlist.
// A declared key that is not a name, or a value holding a NUL byte, is an
// error; a declared TOYBOX_* key is overridden by the wall's own.
func (b *planner) env() error {
	m := map[string]string{}
	for k, v := range b.hostEnv() {
		if k == "PATH" || k == "LANG" || k == "TZ" || strings.HasPrefix(k, "LC_") {
			m[k] = v
		}
	}
	if m["PATH"] == "" {
		m["PATH"] = "/usr/local/bin:/usr/bin:/bin"
	}
	maps.Copy(m, RuntimeEnv)
	// Python writes its bytecode beside the source, in the vat's
	// read-only code: it would compile every module again at each start.
	m["PYTHONPYCACHEPREFIX"] = filepath.Join(b.data, ".cache", "python")
	for k, v := range b.spec.Env {
		if !validEnvKey(k) {
			return fmt.Errorf("%w: environment key %q is not a variable name", ErrSpec, k)
		}
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("%w: the value of %s holds a NUL byte", ErrSpec, k)
		}
		if !strings.HasPrefix(k, "TOYBOX_") {
			m[k] = v
		}
	}
	cache := filepath.Join(b.data, ".cache")
	for k, v := range map[string]string{
		"TOYBOX_VAT":       string(b.spec.ID),
		"TOYBOX_LISTEN":    ListenPath,
		"TOYBOX_CAP_FD":    strconv.Itoa(CapFD),
		"TOYBOX_DATA":      b.data,
		"HOME":             b.data,
		"XDG_CACHE_HOME":   cache,
		"npm_config_cache": filepath.Join(cache, "npm"),
		"UV_CACHE_DIR":     filepath.Join(cache, "uv"),
		"TMPDIR":           "/tmp",
		"USER":             "vat",
		"LOGNAME":          "vat",
	} {
		m[k] = v
	}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy", "NODE_USE_ENV_PROXY"} {
		delete(m, k)
	}
	if !b.p.NoNet {
		proxy := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(b.p.ProxyPort))
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			m[k] = proxy
		}
		m["NO_PROXY"] = "localhost,127.0.0.1,::1"
		m["no_proxy"] = m["NO_PROXY"]
		m["NODE_USE_ENV_PROXY"] = "1"
	}
	if b.p.ListenPort != 0 {
		// The app listens on its port; $TOYBOX_LISTEN is the entry's.
		m["PORT"] = strconv.Itoa(b.p.ListenPort)
		delete(m, "TOYBOX_LISTEN")
	}
	if b.p.MCP != nil {
		// A stdio MCP vat's processes listen on nothing and hold no
		// capability.
		delete(m, "TOYBOX_LISTEN")
		delete(m, "TOYBOX_CAP_FD")
	}
	for k, v := range m {
		b.p.Env = append(b.p.Env, k+"="+v)
	}
	slices.Sort(b.p.Env)
	return nil
}

// validEnvKey reports whether k is a portable variable name.
func validEnvKey(k string) bool {
	if k == "" || (k[0] >= '0' && k[0] <= '9') {
		return false
	}
	for _, r := range k {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func (b *planner) hostEnv() map[string]string {
	list := b.spec.HostEnv
	if list == nil {
		// The host's environment names what the plan hides (HOME,
		// CREDENTIALS_DIRECTORY). A caller that leaves HostEnv out must
		// not lose those masks.
		list = os.Environ() //nolint:forbidigo // a fact of the host, not a setting
	}
	m := make(map[string]string, len(list))
	for _, kv := range list {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}
