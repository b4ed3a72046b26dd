package doors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"toybox/labels"
	"toybox/vat/strictjson"
)

// maxTableSize bounds the table file, in bytes.
const maxTableSize = 1 << 20

// Limits bound every door call of a table. A zero field means its default.
type Limits struct {
	// MaxRequestBody is the largest request body a vat may send, in bytes.
	// If zero, 1 MiB.
	MaxRequestBody int
	// MaxResponseBody is the largest answer body passed back, in bytes; a
	// larger answer fails the call. If zero, 1 MiB.
	MaxResponseBody int
	// Timeout bounds one call, from dialling the backend to the end of its
	// answer. If zero, 10s.
	Timeout time.Duration
	// MaxInFlight bounds the calls of one grant running at once; more are
	// refused. If zero, 8.
	MaxInFlight int
}

func (l Limits) withDefaults() Limits {
	if l.MaxRequestBody <= 0 {
		l.MaxRequestBody = 1 << 20
	}
	if l.MaxResponseBody <= 0 {
		l.MaxResponseBody = 1 << 20
	}
	if l.Timeout <= 0 {
		l.Timeout = 10 * time.Second
	}
	if l.MaxInFlight <= 0 {
		l.MaxInFlight = 8
	}
	return l
}

// Backend is where a set's calls go: a unix socket or a loopback HTTP
// service of the operator's.
type Backend struct {
	// Network is "unix" or "tcp".
	Network string
	// Address is the socket path (unix) or the loopback "ip:port" (tcp).
	Address string
}

// String spells the backend as the table does.
func (b Backend) String() string {
	if b.Network == "unix" {
		return "unix:" + b.Address
	}
	return "http://" + b.Address
}

// Set is one vat's door set, from the operator's table.
type Set struct {
	// ID is the vat id the set belongs to (and its name).
	ID string
	// FirstParty marks the vat as the operator's own; only first-party vats
	// get doors.
	FirstParty bool
	// Backend serves the set's entries.
	Backend Backend
	// Entries are the exact host functions, in table order.
	Entries []Entry
}

// Table is the operator's core table of door sets. It is read once, at
// start, from a file the operator owns; never from a manifest. A nil *Table
// is an empty table: no vat has doors.
type Table struct {
	sets map[string]*Set
	// Limits bound every call of every grant made from this table after the
	// field is set. The zero value means the defaults.
	Limits Limits
}

// Set returns the set for vat id, and whether the table has one.
func (t *Table) Set(id string) (Set, bool) {
	if t == nil {
		return Set{}, false
	}
	s, ok := t.sets[id]
	if !ok {
		return Set{}, false
	}
	c := *s
	c.Entries = append([]Entry(nil), s.Entries...)
	return c, true
}

// IDs lists the vat ids the table has a set for, sorted.
func (t *Table) IDs() []string {
	if t == nil {
		return nil
	}
	ids := make([]string, 0, len(t.sets))
	for id := range t.sets {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// LoadTable reads the operator's door table from path. The file must be a
// regular file of at most 1 MiB, owned by root or by this process's user,
// and writable by no one else; its contents are parsed strictly (ParseTable).
// A missing file is an error wrapping fs.ErrNotExist: a caller that treats a
// missing default file as "no doors" checks for that itself.
func LoadTable(path string) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening door table: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading door table %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrBadTable, path)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("%w: %s is writable by group or others (mode %04o); only its owner may write it", ErrBadTable, path, fi.Mode().Perm())
	}
	if why := ownerProblem(fi); why != "" {
		return nil, fmt.Errorf("%w: %s %s", ErrBadTable, path, why)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTableSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading door table %s: %w", path, err)
	}
	if len(data) > maxTableSize {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrBadTable, path, maxTableSize)
	}
	t, err := ParseTable(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

type tableJSON struct {
	Sets map[string]setJSON `json:"sets"`
}

type setJSON struct {
	FirstParty bool     `json:"firstParty"`
	Backend    string   `json:"backend"`
	Entries    []string `json:"entries"`
}

// ParseTable reads a door table:
//
//	{"sets": {"<vat id>": {"firstParty": true,
//	                       "backend": "unix:/run/kiosk.sock" | "http://127.0.0.1:8080",
//	                       "entries": ["GET /kiosk/state", "POST /kiosk/state"]}}}
//
// Unknown keys, duplicate keys, trailing data, bad vat ids, bad backends and
// bad or duplicate entries are refused with a message that names the problem.
func ParseTable(data []byte) (*Table, error) {
	if err := strictjson.Keys(data, nil); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadTable, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var tj tableJSON
	if err := dec.Decode(&tj); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadTable, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the table's closing brace", ErrBadTable)
	}
	if tj.Sets == nil {
		return nil, fmt.Errorf("%w: no \"sets\" object (write {\"sets\": {}} for no doors)", ErrBadTable)
	}
	t := &Table{sets: make(map[string]*Set, len(tj.Sets))}
	for id, sj := range tj.Sets {
		s, err := parseSet(id, sj)
		if err != nil {
			return nil, fmt.Errorf("%w: set %q: %w", ErrBadTable, clip(id), err)
		}
		t.sets[id] = s
	}
	return t, nil
}

func parseSet(id string, sj setJSON) (*Set, error) {
	if _, err := labels.ParseVatID(id); err != nil { // the table file is where a set's id enters
		return nil, err
	}
	b, err := parseBackend(sj.Backend)
	if err != nil {
		return nil, err
	}
	if len(sj.Entries) == 0 {
		return nil, errors.New("no entries")
	}
	s := &Set{ID: id, FirstParty: sj.FirstParty, Backend: b}
	seen := map[string]bool{}
	for _, es := range sj.Entries {
		e, err := ParseEntry(es)
		if err != nil {
			return nil, err
		}
		if seen[e.Name()] {
			return nil, fmt.Errorf("entry %q is listed twice", es)
		}
		seen[e.Name()] = true
		s.Entries = append(s.Entries, e)
	}
	return s, nil
}

// parseBackend reads "unix:/absolute/clean/path" or
// "http://<loopback ip>:<port>" (no path, query, user or fragment).
func parseBackend(s string) (Backend, error) {
	switch {
	case s == "":
		return Backend{}, errors.New("no backend")
	case strings.HasPrefix(s, "unix:"):
		p := strings.TrimPrefix(s, "unix:")
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsRune(p, 0) {
			return Backend{}, fmt.Errorf("backend %q: the socket path must be absolute and clean", s)
		}
		return Backend{Network: "unix", Address: p}, nil
	case strings.HasPrefix(s, "http://"):
		u, err := url.Parse(s)
		if err != nil {
			return Backend{}, fmt.Errorf("backend %q: %w", s, err)
		}
		if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || u.ForceQuery {
			return Backend{}, fmt.Errorf("backend %q: only http://<loopback ip>:<port>, with no user, path or query", s)
		}
		ip, err := netip.ParseAddr(u.Hostname())
		if err != nil || !ip.Unmap().IsLoopback() {
			return Backend{}, fmt.Errorf("backend %q: the host must be a loopback IP literal (127.0.0.1 or ::1)", s)
		}
		port, err := strconv.Atoi(u.Port())
		if err != nil || port < 1 || port > 65535 {
			return Backend{}, fmt.Errorf("backend %q: needs a port 1-65535", s)
		}
		return Backend{Network: "tcp", Address: net.JoinHostPort(ip.Unmap().String(), strconv.Itoa(port))}, nil
	default:
		return Backend{}, fmt.Errorf("backend %q is neither unix:/absolute/path nor http://<loopback ip>:<port>", clip(s))
	}
}
