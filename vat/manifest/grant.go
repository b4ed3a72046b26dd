package manifest

import (
	"encoding/json"
	"fmt"
	"strings"

	"toybox/labels"
	"toybox/vat/wall"
)

// ownerGrant names the ?egress= part of a grant: the one the owner typed.
const ownerGrant = "egress"

// internetGrant is what "network": "internet" means: HTTPS to public addresses.
const internetGrant = `{"scheme":"https","port":443,"network":"public"}`

// Grant returns the vat's egress grant: the owner's ?egress= value (param,
// may be empty), then the manifest's egress, then its network shape mapped to
// labels. An empty result means no egress at all. Every part is parsed by
// the labels package, which refuses a grant that names vat or origin.
//
// What the manifest grants was written by the add-on's author, not typed by
// its owner: those sets carry origin "manifest", so the switchboard's
// listener-owner check never lets them reach a process of toybox's user
// (only the vat's own compose project's published ports). The owner's
// ?egress= sets carry no origin.
func (m *Manifest) Grant(param string) ([]labels.Set, error) {
	var out []labels.Set
	add := func(what, s string) error {
		sets, err := labels.ParseGrant(s)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrBadGrant, what, err)
		}
		if what != ownerGrant {
			for i := range sets {
				sets[i].Origin = labels.OriginManifest
			}
		}
		out = append(out, sets...)
		return nil
	}
	if strings.TrimSpace(param) != "" {
		if err := add(ownerGrant, param); err != nil {
			return nil, err
		}
	}
	if len(m.Egress) > 0 {
		if err := add("manifest egress", string(m.Egress)); err != nil {
			return nil, err
		}
	}
	switch m.Network.Kind {
	case "internet":
		if err := add("network internet", internetGrant); err != nil {
			return nil, err
		}
	case "hosts":
		for _, h := range m.Network.Hosts {
			obj := map[string]any{"host": h.Host}
			if h.Scheme != "" {
				obj["scheme"] = h.Scheme
			}
			if h.Port != 0 {
				obj["port"] = h.Port
			}
			b, err := json.Marshal(obj)
			if err != nil {
				return nil, err
			}
			if err := add("network host "+h.String(), string(b)); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// Net returns what toybox-entry serves inside the wall for this manifest and
// grant: nothing at all (None) when there is no grant; otherwise the proxy,
// plus a forward for each listed loopback host with a port, so a program that
// dials 127.0.0.1:5432 inside the wall reaches the host's 127.0.0.1:5432
// through the vat's Handle (when its grant and switchboard socket allow it).
func (m *Manifest) Net(grant []labels.Set) wall.Net {
	if len(grant) == 0 {
		return wall.Net{None: true}
	}
	var n wall.Net
	seen := map[uint16]bool{}
	granted := func(h Host) bool {
		for _, g := range grant {
			if g.Host == h.Host && g.Port == h.Port {
				return true
			}
		}
		return false
	}
	for _, h := range m.Network.Hosts {
		if !h.Loopback() || h.Port == 0 || seen[h.Port] || !granted(h) {
			continue // a default the supervisor dropped is not forwarded
		}
		seen[h.Port] = true
		n.Forwards = append(n.Forwards, wall.Forward{Port: h.Port, Host: h.Host, TargetPort: h.Port})
	}
	return n
}

// Default is the manifest of a single-executable install: run it, no
// declared env, no network beyond the owner's ?egress= grant.
func Default(name string) *Manifest {
	return &Manifest{Command: []string{"./" + name}}
}
