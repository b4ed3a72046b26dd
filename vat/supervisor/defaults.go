package supervisor

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"toybox/labels"
	"toybox/vat/compose"
	"toybox/vat/grant"
	"toybox/vat/store"
)

// composeFiles are the names a vat's own compose file may have, at the top
// of its bundle.
var composeFiles = []string{"compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml"}

// loopbackDefault reports whether g is an address on this host's loopback
// that the manifest wrote (not one the owner typed).
func loopbackDefault(g labels.Set) bool {
	return g.Origin == labels.OriginManifest && labels.LoopbackHost(g.Host)
}

// checkOwnPorts refuses a manifest that names one of the supervisor's own
// ports on loopback: no grant a manifest wrote may point a vat at toybox.
// (What the owner types is the owner's; the switchboard's listener-owner
// check still judges it.)
func (s *Supervisor) checkOwnPorts(g []labels.Set) error {
	for _, set := range g {
		if !loopbackDefault(set) {
			continue
		}
		for _, p := range s.cfg.OwnPorts {
			if set.Port == p {
				return fmt.Errorf("%w: the manifest names %s:%d, the supervisor's own port", ErrBadInput, set.Host, p)
			}
		}
	}
	return nil
}

// grantFor returns the grant vat code runs with, and what was dropped from
// it. The manifest-defaults rule: a loopback address the manifest wrote is
// granted only when the vat's own compose file publishes that port on
// 127.0.0.1 over TCP; any other set the manifest wrote is narrowed to public
// addresses (one that asks for the local network is dropped). What is
// dropped the vat starts without, and its status says why. What the owner
// typed (?egress=) is kept as it is; the switchboard's listener-owner check
// judges every loopback connection either way.
func (s *Supervisor) grantFor(code store.Code, egress string) ([]labels.Set, []grant.Dropped, error) {
	g, err := code.Manifest.Grant(egress)
	if err != nil {
		return nil, nil, err
	}
	var yaml []byte
	var yamlName string
	loaded := false
	var kept []labels.Set
	var dropped []grant.Dropped
	for _, set := range g {
		if set.Origin != labels.OriginManifest {
			kept = append(kept, set) // the owner typed it
			continue
		}
		if !loopbackDefault(set) {
			// Only the owner may open the local network (the LAN, this
			// host's other addresses, containers' bridge addresses): what
			// the manifest wrote reaches public addresses only.
			if set.Network == labels.NetworkLocal {
				dropped = append(dropped, grant.Dropped{Set: set, Why: "the manifest asks for the local network; only the owner can grant that (?egress=)"})
				continue
			}
			set.Network = labels.NetworkPublic
			kept = append(kept, set)
			continue
		}
		if set.Port == 0 {
			dropped = append(dropped, grant.Dropped{Set: set, Why: "the manifest names a loopback host without a port"})
			continue
		}
		if !loaded {
			loaded = true
			yaml, yamlName, err = readCompose(code.Dir)
			if err != nil {
				return nil, nil, err
			}
		}
		if yaml == nil {
			dropped = append(dropped, grant.Dropped{Set: set, Why: fmt.Sprintf("the bundle has no compose file publishing port %d on 127.0.0.1", set.Port)})
			continue
		}
		ok, err := compose.Publishes(yaml, set.Port)
		switch {
		case err != nil:
			dropped = append(dropped, grant.Dropped{Set: set, Why: fmt.Sprintf("%s: %v", yamlName, err)})
		case !ok:
			dropped = append(dropped, grant.Dropped{Set: set, Why: fmt.Sprintf("%s does not publish port %d on 127.0.0.1 over TCP", yamlName, set.Port)})
		default:
			kept = append(kept, set)
		}
	}
	return kept, dropped, nil
}

// maxComposeBytes bounds a bundle's compose file: it is read whole, and
// parsing takes a few tens of times its size in memory.
const maxComposeBytes = 512 << 10

// readCompose returns the bundle's own compose file, or nil when it has
// none. A compose file that is a link or not a regular file is an error.
func readCompose(dir string) ([]byte, string, error) {
	for _, name := range composeFiles {
		p := filepath.Join(dir, name)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, "", fmt.Errorf("reading the vat's compose file: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return nil, "", fmt.Errorf("%w: the vat's %s is not a regular file", ErrBadInput, name)
		}
		if fi.Size() > maxComposeBytes {
			return nil, "", fmt.Errorf("%w: the vat's %s is %d bytes; at most %d", ErrBadInput, name, fi.Size(), maxComposeBytes)
		}
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return nil, "", fmt.Errorf("reading the vat's compose file: %w", err)
		}
		data, err := io.ReadAll(io.LimitReader(f, maxComposeBytes+1))
		_ = f.Close()
		if err != nil {
			return nil, "", fmt.Errorf("reading the vat's compose file: %w", err)
		}
		if len(data) > maxComposeBytes {
			return nil, "", fmt.Errorf("%w: the vat's %s is more than %d bytes", ErrBadInput, name, maxComposeBytes)
		}
		return data, name, nil
	}
	return nil, "", nil
}

// logDropped says, once per install or start, which manifest addresses a
// vat runs without.
func (s *Supervisor) logDropped(id string, dropped []grant.Dropped) {
	for _, d := range dropped {
		s.log.Warn("manifest address dropped: the vat starts without it", keyVat, id, keyReason, d.String())
	}
}
