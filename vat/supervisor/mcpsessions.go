package supervisor

import (
	"container/list"
	"sync"
)

// maxSessions bounds the sessions one instance's edge keeps: each is a few
// dozen bytes here, and past it the least recently used one is ended (at
// the vat too), whose client gets 404 and initializes again.
const maxSessions = 8192

// sessionTable maps the session ids a vat minted to the principal that
// opened each, least recently used first out. Safe for concurrent use.
type sessionTable struct {
	max  int
	mu   sync.Mutex
	byID map[string]*list.Element
	lru  list.List // of *sessionEntry, most recent at the front
}

type sessionEntry struct{ id, principal string }

func newSessionTable(max int) *sessionTable {
	return &sessionTable{max: max, byID: map[string]*list.Element{}}
}

// bind keeps session id as principal's, and returns the session it evicted
// to make room, with its principal ("" for none). An id already kept
// keeps its first principal.
func (t *sessionTable) bind(id, principal string) (evicted, evictedPrincipal string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.byID[id]; ok {
		t.lru.MoveToFront(e)
		return "", ""
	}
	t.byID[id] = t.lru.PushFront(&sessionEntry{id: id, principal: principal})
	if t.lru.Len() <= t.max {
		return "", ""
	}
	old := t.lru.Back()
	se := old.Value.(*sessionEntry)
	t.lru.Remove(old)
	delete(t.byID, se.id)
	return se.id, se.principal
}

// owner returns the principal of session id, if it is kept.
func (t *sessionTable) owner(id string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.byID[id]
	if !ok {
		return "", false
	}
	t.lru.MoveToFront(e)
	return e.Value.(*sessionEntry).principal, true
}

// drop forgets session id.
func (t *sessionTable) drop(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.byID[id]; ok {
		t.lru.Remove(e)
		delete(t.byID, id)
	}
}

func (t *sessionTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lru.Len()
}
