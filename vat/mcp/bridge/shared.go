package bridge

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"toybox/vat/mcp"
)

// sharedOwner holds a process that serves many legacy sessions: a
// principal's (ModeShared) or everyone's (ModeSingle). toybox initializes
// it once, with no client capabilities of its own: a server request
// carries nothing that says which session caused it, so none is sent on.
type sharedOwner struct {
	b   *Bridge
	key string
	env []string // its principal's secrets, set in each of its processes

	mu       sync.Mutex
	p        *proc // replaced when it exits on its own (R26)
	exits    int   // its processes' exits in a row, each lived < MaxRestart
	born     time.Time
	sessions map[*session]bool
	init     []byte // the vat's InitializeResult
	version  string
	subs     map[string]int // resources/subscribe counts by URI
	level    int            // the log level the vat was asked for (0: none yet)
}

// logLevels ranks the syslog levels of notifications/message, most
// verbose first (1..8; 0 is "not set").
var logLevels = map[string]int{"debug": 1, "info": 2, "notice": 3, "warning": 4, "error": 5, "critical": 6, "alert": 7, "emergency": 8}

func levelName(n int) string {
	for k, v := range logLevels {
		if v == n {
			return k
		}
	}
	return ""
}

// sharedFor returns the shared process for s's principal, started and
// initialized.
func (b *Bridge) sharedFor(principal string, env []string) (*sharedOwner, error) {
	key := principal
	if b.cfg.Mode == ModeSingle {
		key, env = "", nil // one process for everyone holds no one's secrets
	}
	b.mu.Lock()
	if o := b.shared[key]; o != nil {
		b.mu.Unlock()
		return o, nil
	}
	b.mu.Unlock()
	o := &sharedOwner{b: b, key: key, env: env, sessions: map[*session]bool{}, subs: map[string]int{}}
	p, err := b.acquire(o, env)
	if err != nil {
		return nil, err
	}
	o.p, o.born = p, time.Now()
	if err := o.handshake(); err != nil {
		go p.stop()
		return nil, err
	}
	b.mu.Lock()
	if other := b.shared[key]; other != nil {
		b.mu.Unlock()
		go p.stop()
		return other, nil
	}
	b.shared[key] = o
	b.mu.Unlock()
	return o, nil
}

// handshakeTimeout bounds toybox's own initialize of a shared process.
const handshakeTimeout = 30 * time.Second

// handshake sends toybox's initialize and initialized.
func (o *sharedOwner) handshake() error {
	init, version, err := o.b.handshake(o.proc(), "{}")
	o.mu.Lock()
	o.init, o.version = init, version
	o.mu.Unlock()
	return err
}

// proc is the process serving o now.
func (o *sharedOwner) proc() *proc {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.p
}

// handshake initializes p as toybox's own client, declaring the client
// capabilities caps (a JSON object), and returns the vat's InitializeResult and version.
func (b *Bridge) handshake(p *proc, caps string) ([]byte, string, error) {
	init := mcp.Request([]byte("0"), "initialize", []byte(`{"protocolVersion":"2025-11-25","capabilities":`+caps+`,"clientInfo":{"name":"toybox","version":"1"}}`))
	m, _ := mcp.Parse(init)
	resp, err := b.callSelf(p, m, handshakeTimeout)
	if err != nil {
		return nil, "", err
	}
	if resp.Result() == nil {
		return nil, "", errString("the vat refused toybox's initialize: " + string(resp.Error()))
	}
	var res struct {
		ProtocolVersion string          `json:"protocolVersion"`
		ServerInfo      json.RawMessage `json:"serverInfo"`
	}
	_ = json.Unmarshal(resp.Result(), &res)
	b.noteServer(mcp.Legacy, res.ServerInfo)
	if err := p.write(mcp.Notification("notifications/initialized", nil)); err != nil {
		return nil, "", err
	}
	return bytes.Clone(resp.Result()), res.ProtocolVersion, nil
}

type errString string

func (e errString) Error() string { return string(e) }

// callSelf sends toybox's own request and waits for its answer.
func (b *Bridge) callSelf(p *proc, m mcp.Msg, timeout time.Duration) (mcp.Msg, error) {
	st := newStream("", false)
	c := &call{st: st}
	if err := p.send(m, c); err != nil {
		return mcp.Msg{}, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		for _, e := range st.since(0) {
			if e.final {
				return mcp.Parse(e.data)
			}
		}
		select {
		case <-st.notify:
		case <-t.C:
			p.cancel(c, "timed out")
			return mcp.Msg{}, errString("the vat did not answer " + m.Method + " within " + timeout.String())
		}
	}
}

// initializeShared starts a session on the shared process, answering its
// initialize from the vat's first answer.
func (b *Bridge) initializeShared(w http.ResponseWriter, r *http.Request, s *session, m mcp.Msg) {
	o, err := b.sharedFor(s.principal, s.env)
	if err != nil {
		b.unavailable(w, r, s.principal, mcp.Legacy, m, err)
		return
	}
	o.mu.Lock()
	s.mu.Lock()
	s.p, s.sh = o.p, o
	s.version = o.version
	s.mu.Unlock()
	o.sessions[s] = true
	n, init := o.p.n, o.init
	o.mu.Unlock()
	b.mu.Lock()
	b.sessions[s.id] = s
	b.mu.Unlock()
	w.Header().Set(mcp.HeaderSession, s.id)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(mcp.ResultResponse(m.ID, init))
	b.decide(r, s.principal, mcp.Legacy, s.id, m.Method, http.StatusOK, "session started on shared process "+strconv.Itoa(n))
}

// local answers what a session on a shared process must not send on: a
// second initialize, and subscriptions another session holds too.
func (o *sharedOwner) local(w http.ResponseWriter, r *http.Request, s *session, m mcp.Msg) bool {
	switch m.Method {
	case "initialize":
		o.mu.Lock()
		init := o.init
		o.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(mcp.ResultResponse(m.ID, init))
		o.b.decide(r, s.principal, mcp.Legacy, s.id, m.Method, http.StatusOK, "answered from the shared process's initialize")
		return true
	case "logging/setLevel":
		// Kept per session: the vat is asked for the most verbose
		// level any session wants, and each session gets only what
		// its own level lets through (R33).
		name, _ := m.GetString("params", "level")
		lv := logLevels[name]
		if lv == 0 {
			writeError(w, http.StatusOK, m.ID, mcp.CodeInvalidParams, "unknown log level "+strconv.Quote(name), nil)
			return true
		}
		s.mu.Lock()
		s.level = lv
		s.mu.Unlock()
		o.mu.Lock()
		want := lv
		for other := range o.sessions {
			other.mu.Lock()
			if other.level != 0 && other.level < want {
				want = other.level
			}
			other.mu.Unlock()
		}
		send := o.level == 0 || want != o.level
		o.level = want
		o.mu.Unlock()
		if send {
			params, _ := json.Marshal(map[string]string{"level": levelName(want)})
			sm, _ := mcp.Parse(mcp.Request([]byte("0"), "logging/setLevel", params))
			if _, err := o.b.callSelf(o.proc(), sm, handshakeTimeout); err != nil {
				writeError(w, http.StatusOK, m.ID, mcp.CodeInternal, err.Error(), nil)
				return true
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(mcp.ResultResponse(m.ID, []byte("{}")))
		o.b.decide(r, s.principal, mcp.Legacy, s.id, m.Method, http.StatusOK, "the session's level is "+name+"; the shared process's "+levelName(want))
		return true
	case "resources/subscribe", "resources/unsubscribe":
		uri, _ := m.GetString("params", "uri")
		o.mu.Lock()
		s.mu.Lock()
		had := s.subs[uri]
		sub := m.Method == "resources/subscribe"
		if sub && !had {
			s.subs[uri] = true
			o.subs[uri]++
		} else if !sub && had {
			delete(s.subs, uri)
			o.subs[uri]--
		}
		n := o.subs[uri]
		if n <= 0 {
			delete(o.subs, uri)
		}
		s.mu.Unlock()
		o.mu.Unlock()
		// Only the first subscriber's and the last one's reach the vat.
		if (sub && n == 1 && !had) || (!sub && n == 0 && had) {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(mcp.ResultResponse(m.ID, []byte("{}")))
		o.b.decide(r, s.principal, mcp.Legacy, s.id, m.Method, http.StatusOK, "answered by toybox: another session holds the subscription")
		return true
	}
	return false
}

func (o *sharedOwner) leave(s *session) {
	o.mu.Lock()
	delete(o.sessions, s)
	s.mu.Lock()
	subs := s.subs
	s.subs = map[string]bool{}
	s.mu.Unlock()
	var unsub []string
	for uri := range subs {
		if o.subs[uri]--; o.subs[uri] <= 0 {
			delete(o.subs, uri)
			unsub = append(unsub, uri)
		}
	}
	o.mu.Unlock()
	for _, uri := range unsub {
		params, _ := json.Marshal(map[string]string{"uri": uri})
		m, _ := mcp.Parse(mcp.Request([]byte("0"), "resources/unsubscribe", params))
		p := o.proc()
		go func() { _, _ = o.b.callSelf(p, m, handshakeTimeout) }()
	}
}

// fromVat: a server request cannot be attributed to a session (R30); a
// notification goes to every session of the process, resources/updated
// only to its subscribers.
func (o *sharedOwner) fromVat(p *proc, m mcp.Msg) {
	if m.Kind == mcp.KindRequest {
		_ = p.write(mcp.ErrorResponse(m.ID, mcp.CodeMethodNotFound, "toybox serves this vat to several clients from one process; a request from it cannot be routed to one", nil))
		o.b.logVat(p, "refused", m.Method+": a server request on a shared process")
		return
	}
	if m.Kind != mcp.KindNotification {
		return
	}
	uri, _ := m.GetString("params", "uri")
	lname, _ := m.GetString("params", "level")
	lv := logLevels[lname]
	o.mu.Lock()
	var to []*session
	for s := range o.sessions {
		s.mu.Lock()
		sub, level := s.subs[uri], s.level
		s.mu.Unlock()
		if m.Method == "notifications/resources/updated" && !sub {
			continue
		}
		if m.Method == "notifications/message" && level != 0 && lv < level {
			continue
		}
		to = append(to, s)
	}
	o.mu.Unlock()
	for _, s := range to {
		s.get.push(m.Raw, false)
	}
}

// exited: a shared process toybox stopped ends its sessions. One that
// exited on its own is started again after a wait (Config.Restart,
// doubling with each exit in a row up to MaxRestart) and initialized
// again by toybox, its sessions kept: toybox initialized it, so they need
// nothing of their clients (R26). Meanwhile their requests get -32603
// naming the exit. Once the bridge is crashing, the sessions end.
func (o *sharedOwner) exited(p *proc) {
	p.mu.Lock()
	closing := p.closing
	p.mu.Unlock()
	o.b.mu.Lock()
	crashing, closed := o.b.crashing, o.b.closed
	o.b.mu.Unlock()
	o.mu.Lock()
	if o.p != p {
		o.mu.Unlock()
		return
	}
	if closing || crashing != "" || closed {
		o.mu.Unlock()
		o.endAll("its shared process exited (" + p.exitText + ")")
		return
	}
	if time.Since(o.born) >= o.b.cfg.MaxRestart {
		o.exits = 0
	}
	o.exits++
	wait := o.b.cfg.Restart << min(o.exits-1, 16)
	wait = min(wait, o.b.cfg.MaxRestart)
	o.mu.Unlock()
	o.b.mu.Lock()
	if o.b.shared[o.key] == nil {
		o.b.shared[o.key] = o // new sessions of its principal wait for it too
	}
	o.b.mu.Unlock()
	o.b.logVat(p, "restarting", "the shared process exited ("+p.exitText+"); toybox starts it again in "+wait.String())
	time.AfterFunc(wait, func() { o.restart(p) })
}

// restart starts and initializes a process in place of old, moving the
// sessions, their subscriptions and the log level to it.
func (o *sharedOwner) restart(old *proc) {
	p, err := o.b.acquire(o, o.env)
	if err != nil {
		o.endAll("its shared process exited (" + old.exitText + ") and could not be started again: " + err.Error())
		return
	}
	o.mu.Lock()
	o.p, o.born = p, time.Now()
	o.mu.Unlock()
	if err := o.handshake(); err != nil {
		go p.stop()
		o.endAll("its shared process was started again but refused toybox's initialize: " + err.Error())
		return
	}
	o.mu.Lock()
	subs := make([]string, 0, len(o.subs))
	for uri := range o.subs {
		subs = append(subs, uri)
	}
	level := o.level
	for s := range o.sessions {
		s.mu.Lock()
		s.p = p
		s.mu.Unlock()
	}
	o.mu.Unlock()
	for _, uri := range subs {
		params, _ := json.Marshal(map[string]string{"uri": uri})
		m, _ := mcp.Parse(mcp.Request([]byte("0"), "resources/subscribe", params))
		_, _ = o.b.callSelf(p, m, handshakeTimeout)
	}
	if level != 0 {
		params, _ := json.Marshal(map[string]string{"level": levelName(level)})
		m, _ := mcp.Parse(mcp.Request([]byte("0"), "logging/setLevel", params))
		_, _ = o.b.callSelf(p, m, handshakeTimeout)
	}
	o.b.logVat(p, "restarted", "the shared process was started again; its sessions go on")
}

// endAll ends every session of o and forgets it.
func (o *sharedOwner) endAll(reason string) {
	o.b.mu.Lock()
	if o.b.shared[o.key] == o {
		delete(o.b.shared, o.key)
	}
	o.b.mu.Unlock()
	o.mu.Lock()
	var ss []*session
	for s := range o.sessions {
		ss = append(ss, s)
	}
	o.mu.Unlock()
	for _, s := range ss {
		o.b.endSession(s, reason, false)
	}
}
