package bridge

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"toybox/vat/mcp"
)

// Child is one running process of the vat's command, as a Spawner started
// it: in its own process group, with the pipes it was given as fds 0-2.
type Child interface {
	// Pid is its process id (where it runs).
	Pid() int
	// Signal sends sig to its process group.
	Signal(sig syscall.Signal) error
	// Done is closed once it has exited and been reaped.
	Done() <-chan struct{}
	// ExitText says how it ended ("exit status 1", "signal: killed");
	// valid once Done is closed.
	ExitText() string
}

// Spawner starts processes of the vat's command. stdin, stdout and stderr
// are the child's ends of its pipes; the caller closes its copies once
// Spawn returns. env (NAME=value, nil for none) is set over the vat's own
// environment: one principal's secrets (R22).
type Spawner interface {
	Spawn(stdin, stdout, stderr *os.File, env []string) (Child, error)
}

// call is one request in flight to a process.
type call struct {
	up       int64  // the id toybox minted upstream
	clientID []byte // the client's id, restored on the way back
	method   string
	st       *stream  // where its response and related messages go
	sess     *session // nil for a stateless request
	token    string   // toybox's progress token, "" if none
	ctoken   []byte   // the client's progress token
	caps     []byte   // a stateless request's clientCapabilities; nil for toybox's own
	started  time.Time
	tmu      sync.Mutex
	timer    *time.Timer // the request's timeout (under tmu)
	// onDone runs once the response was pushed (or the call was dropped),
	// with the response parsed.
	onDone func(resp mcp.Msg, ok bool)
	// onEnd runs then too, for what needs no response: the session's
	// count of calls in flight (no parse on the common path).
	onEnd func()
}

// owner receives what a process sends that is not a response to a call
// and not routed by a token: server requests and notifications.
type owner interface {
	fromVat(p *proc, m mcp.Msg)
	exited(p *proc)
}

// proc is one process of the vat's command and the calls in flight to it.
type proc struct {
	b      *Bridge
	n      int // a number for log records
	child  Child
	stdin  *os.File
	stdout *os.File
	wmu    sync.Mutex // serialises whole lines on stdin

	mu       sync.Mutex
	owner    owner
	next     int64
	calls    map[int64]*call
	progress map[string]*call
	lastUse  time.Time
	closing  bool
	tail     tail  // the end of its stderr
	noise    int64 // its stdout lines dropped

	done     chan struct{} // closed once it is gone and its calls failed
	exitText string
}

// tailMax is how much of a process's stderr is kept for its crash reason.
const tailMax = 64 << 10

type tail struct{ b []byte }

// write appends p, keeping at least the last tailMax bytes (cut only at
// twice that: a copy per line of a flood would cost 64 KiB a line).
func (t *tail) write(p []byte) {
	t.b = append(t.b, p...)
	if len(t.b) > 2*tailMax {
		t.b = append(t.b[:0], t.b[len(t.b)-tailMax:]...)
	}
}

// last returns the last line of it, at most n bytes.
func (t *tail) last(n int) string {
	s := bytes.TrimRight(t.b, "\n")
	if i := bytes.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return string(s)
}

// Set by tests alone, to hold a step where a slow one would stop: after
// a process has started and before it is entered (beforeAdmit), and
// after it is known gone and before the bridge forgets it (beforeForget).
var (
	beforeAdmit  atomic.Pointer[func()]
	beforeForget atomic.Pointer[func(p *proc)]
)

// spawn starts a process with its pipes and the goroutines that read it;
// env is set over the vat's environment (a principal's secrets). admit
// runs with b.mu held, before the goroutines that watch the process
// start: it enters p in the bridge's books (procs, the spare, its
// owner) before p can be found gone. A process that exits at once is
// otherwise forgotten before it is entered, and stays entered, dead.
func (b *Bridge) spawn(env []string, admit func(p *proc)) (*proc, error) {
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			_ = f.Close()
		}
	}
	pipe := func() (*os.File, *os.File, error) {
		r, w, err := os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	inR, inW, err := pipe()
	if err != nil {
		return nil, fmt.Errorf("making the process's pipes: %w", err)
	}
	outR, outW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("making the process's pipes: %w", err)
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("making the process's pipes: %w", err)
	}
	child, err := b.cfg.Spawner.Spawn(inR, outW, errW, env)
	// The child's ends are the child's: ours go, so EOF means it is gone.
	for _, f := range []*os.File{inR, outW, errW} {
		_ = f.Close()
	}
	if err != nil {
		for _, f := range []*os.File{inW, outR, errR} {
			_ = f.Close()
		}
		return nil, fmt.Errorf("starting the vat's command: %w", err)
	}
	p := &proc{
		b: b, child: child, stdin: inW, stdout: outR,
		calls: map[int64]*call{}, progress: map[string]*call{},
		lastUse: time.Now(), done: make(chan struct{}),
	}
	if h := beforeAdmit.Load(); h != nil {
		(*h)()
	}
	b.mu.Lock()
	b.procN++
	p.n = b.procN
	admit(p)
	b.mu.Unlock()
	b.stats.Spawned.Add(1)
	stderrDone, readDone := make(chan struct{}), make(chan struct{})
	go p.readStderr(errR, stderrDone)
	go p.readStdout(outR, readDone)
	go p.monitor(readDone, stderrDone)
	return p, nil
}

// readStderr copies the process's stderr to the vat's log, line by line,
// and keeps its end for the crash reason.
func (p *proc) readStderr(r *os.File, done chan<- struct{}) {
	defer close(done)
	defer r.Close()
	lr := mcp.NewLineReader(r, 64<<10)
	for {
		line, _, err := lr.Next()
		if errors.Is(err, io.EOF) || (err != nil && !errors.Is(err, mcp.ErrTooLong)) {
			return
		}
		p.mu.Lock()
		p.tail.write(line)
		p.tail.write([]byte("\n"))
		p.mu.Unlock()
		p.b.vatLog(line)
	}
}

// readStdout reads the process's messages until its stdout closes.
func (p *proc) readStdout(r *os.File, done chan<- struct{}) {
	defer close(done)
	lr := mcp.NewLineReader(r, p.b.cfg.MaxMessage)
	for {
		line, n, err := lr.Next()
		if errors.Is(err, mcp.ErrTooLong) {
			p.tooLong(line, n)
			continue
		}
		if err != nil {
			return
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		m, perr := mcp.Parse(bytes.Clone(line))
		if perr != nil {
			p.b.dropped(p, line, perr)
			continue
		}
		p.fromVat(m)
	}
}

// monitor waits for the process to end (its stdout read to the end, as
// far as it goes), then fails what is still in flight. A process that
// closes its stdout but runs on is ended after the grace time; what its
// group holds open after it exits is ended after a second.
func (p *proc) monitor(readDone, stderrDone <-chan struct{}) {
	select {
	case <-p.child.Done():
		select {
		case <-readDone:
		case <-time.After(time.Second):
			p.kill()
			select {
			case <-readDone:
			case <-time.After(time.Second):
			}
		}
	case <-readDone:
		select {
		case <-p.child.Done():
		case <-time.After(p.b.cfg.Grace):
			p.kill()
			<-p.child.Done()
		}
	}
	select {
	case <-stderrDone:
	case <-time.After(time.Second):
	}
	_ = p.stdout.Close()
	p.gone()
}

// gone fails every call in flight with the process's exit and tells its
// owner.
func (p *proc) gone() {
	p.mu.Lock()
	p.exitText = p.child.ExitText()
	last := p.tail.last(200)
	calls := p.calls
	p.calls = map[int64]*call{}
	p.progress = map[string]*call{}
	closing := p.closing
	o := p.owner
	p.mu.Unlock()
	_ = p.stdin.Close()
	msg := "the vat's process exited (" + p.exitText + ")"
	if last != "" {
		msg += "; last stderr: " + last
	}
	if !closing {
		p.b.setLastError(msg)
	}
	for _, c := range calls {
		p.finish(c, mcp.ErrorResponse(c.clientID, mcp.CodeInternal, msg, nil))
	}
	if h := beforeForget.Load(); h != nil {
		(*h)(p)
	}
	p.b.procGone(p, msg, closing)
	close(p.done)
	if o != nil {
		o.exited(p)
	}
}

// tooLong answers the call a message past the limit was for (when its
// first bytes name it) and keeps the process.
func (p *proc) tooLong(prefix []byte, n int64) {
	p.b.count(&p.b.stats.TooLong)
	reason := fmt.Sprintf("a message of %d bytes exceeds the limit of %d bytes", n, p.b.cfg.MaxMessage)
	id, ok := mcp.PrefixID(prefix)
	if ok {
		if up, err := strconv.ParseInt(string(id), 10, 64); err == nil {
			if c := p.take(up); c != nil {
				p.finish(c, mcp.ErrorResponse(c.clientID, mcp.CodeInternal, "response exceeds "+strconv.Itoa(p.b.cfg.MaxMessage)+" bytes", nil))
			}
		}
	}
	p.b.setLastError(reason)
	p.b.logVat(p, "too-long", reason)
}

// fromVat routes one message from the process.
func (p *proc) fromVat(m mcp.Msg) {
	if m.Kind == mcp.KindNotification && m.Method == "notifications/tools/list_changed" {
		p.b.cache.invalidate() // before it is routed: a request after it is never answered from before
	}
	switch m.Kind {
	case mcp.KindResponse:
		up, err := strconv.ParseInt(string(m.ID), 10, 64)
		var c *call
		if err == nil {
			c = p.take(up)
		}
		if c == nil {
			// A late answer to a cancelled call, or one never asked.
			p.b.logVat(p, "dropped", "a response to no call in flight (id "+string(m.ID)+")")
			return
		}
		p.finish(c, m.WithID(c.clientID))
		return
	case mcp.KindNotification:
		if tok, ok := m.Get("params", "progressToken"); ok {
			p.mu.Lock()
			c := p.progress[string(tok)]
			p.mu.Unlock()
			if c == nil {
				return // a call already answered
			}
			out, _ := mcp.Set(m.Raw, []string{"params", "progressToken"}, c.ctoken)
			p.b.touch(c)
			c.st.push(out, false)
			return
		}
		if sid, ok := m.Get("params", "_meta", mcp.MetaSubscriptionID); ok {
			if up, err := strconv.ParseInt(string(sid), 10, 64); err == nil {
				p.mu.Lock()
				c := p.calls[up]
				p.mu.Unlock()
				if c != nil {
					out, _ := mcp.Set(m.Raw, []string{"params", "_meta", mcp.MetaSubscriptionID}, c.clientID)
					c.st.push(out, false)
				}
			}
			return
		}
	}
	p.mu.Lock()
	o := p.owner
	p.mu.Unlock()
	if o == nil {
		p.b.logVat(p, "dropped", "a "+m.Kind.String()+" ("+m.Method+") from a process no one uses yet")
		return
	}
	o.fromVat(p, m)
}

// take removes and returns the call with upstream id up.
func (p *proc) take(up int64) *call {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.calls[up]
	if c == nil {
		return nil
	}
	delete(p.calls, up)
	if c.token != "" {
		delete(p.progress, c.token)
	}
	c.tmu.Lock()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.tmu.Unlock()
	p.lastUse = time.Now()
	return c
}

// finish pushes a call's response to its stream, once onDone has seen
// it (what onDone records, the stream's writer may read as it ends).
func (p *proc) finish(c *call, resp []byte) {
	if c.onDone != nil {
		m, err := mcp.Parse(resp)
		c.onDone(m, err == nil)
	}
	if c.onEnd != nil {
		c.onEnd()
	}
	c.st.push(resp, true)
}

var errGone = errors.New("the vat's process has exited")

// send writes c's request upstream with a minted id (and a minted
// progress token), and registers c for its answer.
func (p *proc) send(m mcp.Msg, c *call) error {
	p.mu.Lock()
	if p.calls == nil || p.closing || p.exitText != "" {
		p.mu.Unlock()
		return errGone
	}
	p.next++
	c.up = p.next
	c.clientID = bytes.Clone(m.ID) // not the body's: it is not held past its request
	c.method = m.Method
	c.started = time.Now()
	up := []byte(strconv.FormatInt(c.up, 10))
	raw := m.WithID(up)
	if tok, ok := m.Get("params", "_meta", "progressToken"); ok {
		c.ctoken = bytes.Clone(tok)
		c.token = `"tb-` + strconv.FormatInt(c.up, 10) + `"`
		raw, _ = mcp.Set(raw, []string{"params", "_meta", "progressToken"}, []byte(c.token))
		p.progress[c.token] = c
	}
	p.calls[c.up] = c
	p.lastUse = time.Now()
	if t := p.b.cfg.RequestTimeout; t > 0 {
		c.tmu.Lock()
		c.timer = time.AfterFunc(t, func() { p.timedOut(c) })
		c.tmu.Unlock()
	}
	p.mu.Unlock()
	if err := p.write(raw); err != nil {
		p.take(c.up)
		return err
	}
	return nil
}

// timedOut ends a call that got no answer in time: the vat is told it
// is cancelled, the client gets -32001.
func (p *proc) timedOut(c *call) {
	if p.take(c.up) == nil {
		return
	}
	params := fmt.Sprintf(`{"requestId":%d,"reason":"timed out"}`, c.up)
	_ = p.write(mcp.Notification("notifications/cancelled", []byte(params)))
	p.b.logVat(p, "timed-out", c.method+" had no answer in time")
	p.finish(c, mcp.ErrorResponse(c.clientID, mcp.CodeRequestTimeout, "the vat did not answer "+c.method+" in time", nil))
}

// cancel tells the process a call is cancelled and forgets it: a late
// answer is dropped.
func (p *proc) cancel(c *call, reason string) {
	if p.take(c.up) == nil {
		return
	}
	params := fmt.Sprintf(`{"requestId":%d,"reason":%q}`, c.up, reason)
	_ = p.write(mcp.Notification("notifications/cancelled", []byte(params)))
}

// write sends one line to the process.
func (p *proc) write(line []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	buf := make([]byte, 0, len(line)+1)
	buf = append(append(buf, line...), '\n')
	if _, err := p.stdin.Write(buf); err != nil {
		return fmt.Errorf("%w: %w", errGone, err)
	}
	return nil
}

func (p *proc) kill() { _ = p.child.Signal(syscall.SIGKILL) }

// stop ends the process the way the stdio transport says: close its
// stdin, wait, SIGTERM, wait, SIGKILL (each to its process group). It
// returns once the process is gone.
func (p *proc) stop() {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	p.wmu.Lock()
	_ = p.stdin.Close()
	p.wmu.Unlock()
	grace := p.b.cfg.Grace
	select {
	case <-p.child.Done():
	case <-time.After(grace):
		_ = p.child.Signal(syscall.SIGTERM)
		select {
		case <-p.child.Done():
		case <-time.After(grace):
			p.kill()
		}
	}
	<-p.done
}
