package supervisor

import (
	"container/list"
	"fmt"
	"sync"

	"toybox/vat/mcp"
)

// maxSessions bounds the sessions one instance's edge keeps: each is a few
// dozen bytes here, and past it one is ended (at the vat too), whose
// client gets 404 and initializes again.
const maxSessions = 8192

// maxSessionIDBytes bounds a session id the edge keeps: a vat names its
// sessions, and maxSessions ids of maxVatHeaderBytes each were 2 GiB of one
// vat's. MCP's ids are a UUID, a JWT or a hash.
const maxSessionIDBytes = 1024

// errSessionID ends an answer whose session id the edge does not keep.
var errSessionID = fmt.Errorf("its answer names a session id over %d bytes or with bytes other than visible ASCII", maxSessionIDBytes)

// validSessionID reports whether sid is an id the edge keeps: at most
// maxSessionIDBytes of visible ASCII (MCP allows only 0x21 to 0x7E).
func validSessionID(sid string) bool {
	if len(sid) > maxSessionIDBytes {
		return false
	}
	for i := 0; i < len(sid); i++ {
		if sid[i] < 0x21 || sid[i] > 0x7e {
			return false
		}
	}
	return true
}

// sessionTable maps the session ids a vat minted to the principal that
// opened each. Past its bound it forgets the least recently used session
// of the holder (mcp.Holder) that holds the most: one client opening
// session after session, under one principal or under many of its own
// header values, ends its own, never one of a client holding fewer. Safe
// for concurrent use.
type sessionTable struct {
	max  int
	mu   sync.Mutex
	byID map[string]*list.Element
	// byHolder holds each holder's sessions, most recent at the front:
	// the lists of *sessionEntry that byID points into.
	byHolder map[string]*list.List
	n        int
	clock    uint64 // counts uses, for the least recently used of several principals
}

type sessionEntry struct {
	id, principal string
	used          uint64
}

func newSessionTable(max int) *sessionTable {
	return &sessionTable{max: max, byID: map[string]*list.Element{}, byHolder: map[string]*list.List{}}
}

// use marks e as just used (t.mu held).
func (t *sessionTable) use(e *list.Element) {
	t.clock++
	e.Value.(*sessionEntry).used = t.clock
	t.byHolder[mcp.Holder(e.Value.(*sessionEntry).principal)].MoveToFront(e)
}

// bind keeps session id as principal's, and returns the session it evicted
// to make room, with its principal ("" for none). An id already kept
// keeps its first principal.
func (t *sessionTable) bind(id, principal string) (evicted, evictedPrincipal string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.byID[id]; ok {
		t.use(e)
		return "", ""
	}
	l := t.byHolder[mcp.Holder(principal)]
	if l == nil {
		l = list.New()
		t.byHolder[mcp.Holder(principal)] = l
	}
	t.byID[id] = l.PushFront(&sessionEntry{id: id, principal: principal})
	t.use(t.byID[id])
	t.n++
	if t.n <= t.max {
		return "", ""
	}
	// The holder holding the most; of several, the one whose least
	// recently used session was used longest ago.
	var victim *list.List
	for _, l := range t.byHolder {
		if victim == nil || l.Len() > victim.Len() ||
			l.Len() == victim.Len() && l.Back().Value.(*sessionEntry).used < victim.Back().Value.(*sessionEntry).used {
			victim = l
		}
	}
	se := victim.Back().Value.(*sessionEntry)
	t.removeLocked(victim.Back())
	return se.id, se.principal
}

// removeLocked forgets e (t.mu held).
func (t *sessionTable) removeLocked(e *list.Element) {
	se := e.Value.(*sessionEntry)
	h := mcp.Holder(se.principal)
	l := t.byHolder[h]
	l.Remove(e)
	if l.Len() == 0 {
		delete(t.byHolder, h)
	}
	delete(t.byID, se.id)
	t.n--
}

// owner returns the principal of session id, if it is kept.
func (t *sessionTable) owner(id string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.byID[id]
	if !ok {
		return "", false
	}
	t.use(e)
	return e.Value.(*sessionEntry).principal, true
}

// drop forgets session id.
func (t *sessionTable) drop(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.byID[id]; ok {
		t.removeLocked(e)
	}
}

func (t *sessionTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}
