package wall

import "strings"

// The tables below are the policy every wall shares. They say what is bound,
// what /etc shows, what is masked and what is never a bind source.

// systemDirs are bound read-only at their own path (or recreated as the
// same symlink) in every wall.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcFiles are the only entries of /etc a wall sees (besides the synthesised
// passwd, group and hosts). /etc/shadow and friends are never among them.
var etcFiles = []string{
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/nsswitch.conf",
	"/etc/host.conf", "/etc/gai.conf", "/etc/protocols", "/etc/services", "/etc/mime.types",
	"/etc/ssl/certs", "/etc/ssl/openssl.cnf", "/etc/ca-certificates", "/etc/pki/tls/certs",
	"/etc/alternatives", "/etc/localtime", "/etc/timezone", "/etc/os-release",
}

// secretNames are never bound as a file of their own, and are masked at any
// depth of a bound tree.
var secretNames = map[string]bool{".env": true, ".mcp.json": true}

// maskedNames are masked at any depth of a bound tree too: the usual files
// secrets live in, which a folder an owner binds may hold.
var maskedNames = map[string]bool{
	".envrc": true, ".netrc": true, ".git-credentials": true, ".pgpass": true,
	".npmrc": true, ".pypirc": true,
}

// envTemplates are the .env.* names that hold no secrets by convention and
// that programs read (dotenv-safe checks .env.example); they stay visible.
var envTemplates = map[string]bool{".env.example": true, ".env.sample": true, ".env.template": true, ".env.dist": true}

// masked reports whether a name found in a bound tree is masked: a secret
// name, one of maskedNames, or a .env.* variant (.env.local,
// .env.production) that is not a template.
func masked(name string) bool {
	if secretNames[name] || maskedNames[name] {
		return true
	}
	return strings.HasPrefix(name, ".env.") && !envTemplates[name]
}

// neverSources are never bind sources, nor anything under them.
var neverSources = []string{
	"/proc", "/sys", "/dev", "/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-",
	"/etc/sudoers", "/etc/sudoers.d", "/etc/systemd", "/etc/xdg/autostart", "/run/systemd",
	"/usr/lib/systemd", "/lib/systemd", "/var/lib/systemd", "/etc/credstore", "/etc/credstore.encrypted",
	"/run/credentials", "/run/credstore",
}
