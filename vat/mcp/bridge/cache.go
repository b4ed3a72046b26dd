package bridge

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"toybox/vat/mcp"
)

// toybox caches nothing it proxies by default (R48). A request the
// supervisor marks with mcp.HeaderCache (the vat's manifest opted in) may
// be answered from listCache: a tools/list answer the server marked
// cacheScope "public" with a positive ttlMs, for that long, until any of
// the vat's processes says notifications/tools/list_changed.

// Bounds of the cache.
const (
	cacheMaxTTL     = time.Hour // a server that misses a list_changed is stale an hour at most
	cacheMaxEntries = 64        // pages, across protocol versions
	cacheMaxBytes   = 16 << 20  // results together; a larger one is not kept
)

// listCache holds public tools/list results by cacheKey.
type listCache struct {
	mu      sync.Mutex
	gen     uint64 // counts invalidations: an answer asked for before one is not kept
	entries map[string]cacheEntry
	size    int
	asked   bool // a request came marked with mcp.HeaderCache
	st      CacheStats
}

type cacheEntry struct {
	result  []byte
	expires time.Time
}

// CacheStats are the tools/list cache's counters (Stats.Cache).
type CacheStats struct {
	Entries     int   `json:"entries"`     // pages kept now
	Hits        int64 `json:"hits"`        // requests answered from the cache
	Misses      int64 `json:"misses"`      // marked requests that went to the vat
	Stored      int64 `json:"stored"`      // answers kept
	Invalidated int64 `json:"invalidated"` // list_changed notifications (and cursor errors) that emptied it
}

// cacheMeta are the _meta keys a cached answer may be given for: none of
// them changes a public list (the scope says it is the same for every
// caller). A request with any other key, or any params key but cursor and
// _meta (an MRTR retry's inputResponses or requestState), is not cached.
var cacheMeta = map[string]bool{
	mcp.MetaProtocolVersion: true, mcp.MetaClientCapabilities: true, mcp.MetaClientInfo: true,
	"io.modelcontextprotocol/logLevel": true, "progressToken": true,
}

// cacheKey returns the key of tools/list request m from a client of
// protocol version, and whether it may be answered from the cache at
// all. The key is the version and the cursor, as sent: each page is
// kept on its own.
func cacheKey(m mcp.Msg, version string) (string, bool) {
	if m.Method != mcp.CacheToolsList || version == "" {
		return "", false
	}
	cursor := []byte("-")
	if params := m.Params(); params != nil {
		var ps map[string]json.RawMessage
		if json.Unmarshal(params, &ps) != nil {
			return "", false
		}
		for k, v := range ps {
			switch k {
			case "cursor":
				cursor = append([]byte("c"), v...)
			case "_meta":
				var meta map[string]json.RawMessage
				if json.Unmarshal(v, &meta) != nil {
					return "", false
				}
				for mk := range meta {
					if !cacheMeta[mk] {
						return "", false
					}
				}
			default:
				return "", false
			}
		}
	}
	return version + "\n" + string(cursor), true
}

// wants reports whether the request may use the cache: the supervisor
// marked it, and its principal holds no secrets of its own (R22: its
// processes run with another environment, so their "public" is its own).
func (c *listCache) wants(r *http.Request) bool {
	if r.Header.Get(mcp.HeaderCache) != mcp.CacheToolsList {
		return false
	}
	c.mu.Lock()
	c.asked = true
	c.mu.Unlock()
	return r.Header.Get(mcp.HeaderPrincipalEnv) == ""
}

// get returns the kept result for key, or nil and the generation an
// answer must be asked in to be kept (put).
func (c *listCache) get(key string) ([]byte, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if ok && time.Now().Before(e.expires) {
		c.st.Hits++
		return e.result, c.gen
	}
	if ok {
		c.dropLocked(key)
	}
	c.st.Misses++
	return nil, c.gen
}

func (c *listCache) dropLocked(key string) {
	c.size -= len(c.entries[key].result)
	delete(c.entries, key)
}

// put keeps resp's result under key when the server marked it public
// with a positive ttlMs, and no invalidation came since gen. An error
// answer to a page (an invalid cursor) empties the cache: its pages may
// no longer fit together.
func (c *listCache) put(key string, gen uint64, resp mcp.Msg, ok bool) {
	if !ok {
		return
	}
	result := resp.Result()
	if result == nil {
		if _, cursor, _ := strings.Cut(key, "\n"); resp.Error() != nil && strings.HasPrefix(cursor, "c") {
			c.invalidate()
		}
		return
	}
	ttl, keep := cacheable(result)
	if !keep {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if _, had := c.entries[key]; had {
		c.dropLocked(key)
	}
	if len(c.entries) >= cacheMaxEntries || c.size+len(result) > cacheMaxBytes {
		return
	}
	if c.entries == nil {
		c.entries = map[string]cacheEntry{}
	}
	c.entries[key] = cacheEntry{result: bytes.Clone(result), expires: time.Now().Add(ttl)}
	c.size += len(result)
	c.st.Stored++
}

// cacheable returns how long a tools/list result may be kept: it must be
// complete, say cacheScope "public" (an absent scope is not taken as
// public) and a positive integer ttlMs.
func cacheable(result []byte) (time.Duration, bool) {
	var h struct {
		ResultType *string         `json:"resultType"`
		CacheScope string          `json:"cacheScope"`
		TTLMs      json.RawMessage `json:"ttlMs"`
	}
	if json.Unmarshal(result, &h) != nil {
		return 0, false
	}
	if h.CacheScope != "public" || (h.ResultType != nil && *h.ResultType != "complete") {
		return 0, false
	}
	ms, err := strconv.ParseInt(string(h.TTLMs), 10, 64) // a JSON integer, not a string or a fraction
	if err != nil || ms <= 0 {
		return 0, false
	}
	return min(time.Duration(ms)*time.Millisecond, cacheMaxTTL), true
}

// invalidate empties the cache: a list_changed says every page is stale.
func (c *listCache) invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if len(c.entries) > 0 || c.asked {
		c.st.Invalidated++
	}
	c.entries, c.size = nil, 0
}

// stats returns the counters; nil when no request asked for the cache.
func (c *listCache) stats() *CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.asked {
		return nil
	}
	st := c.st
	st.Entries = len(c.entries)
	return &st
}

// cached looks request m up for a client of version: the answer, under
// the client's own id, or nil and the func that keeps the vat's answer
// (nil when it may not be kept).
func (b *Bridge) cached(r *http.Request, m mcp.Msg, version string) ([]byte, func(mcp.Msg, bool)) {
	if m.Method != mcp.CacheToolsList || !b.cache.wants(r) {
		return nil, nil
	}
	key, ok := cacheKey(m, version)
	if !ok {
		return nil, nil
	}
	result, gen := b.cache.get(key)
	if result != nil {
		return mcp.ResultResponse(m.ID, result), nil
	}
	return nil, func(resp mcp.Msg, ok bool) { b.cache.put(key, gen, resp, ok) }
}

// serveCached writes a cached answer as the call's own answer would be
// written.
func (b *Bridge) serveCached(w http.ResponseWriter, r *http.Request, resp []byte, o writeOpts) {
	st := newStream("", false)
	st.push(resp, true)
	b.serve(w, r, st, o)
}

// both runs f then g, either of which may be nil.
func both(f, g func(mcp.Msg, bool)) func(mcp.Msg, bool) {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func(m mcp.Msg, ok bool) { f(m, ok); g(m, ok) }
}
