package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"toybox/vat/mcp"
)

// toybox stdio is a vat's MCP endpoint as a stdio server, for a client
// that launches stdio servers only: Claude Desktop reads no other kind
// from its config file (a url entry there is skipped, or stops it from
// starting). It reads JSON-RPC messages a line each on stdin, posts each
// to the endpoint (Streamable HTTP), and writes what comes back a line
// each on stdout: a JSON answer, each event of an event stream, and what
// the server sends on its own (the session's GET stream). A request the
// endpoint refuses (a vat off, a token missing) is answered with a
// JSON-RPC error that says so, so that the client shows why.

func init() { commands["stdio"] = stdioMain }

const stdioUsage = `usage: toybox stdio [--token-env NAME] URL

Serves the MCP endpoint URL (a vat's, http://localhost:8787/<vat>/mcp) on
stdin and stdout, for MCP clients that launch stdio servers only (Claude
Desktop's config file). A bearer token for the vat is read from the
environment variable --token-env names. Messages are JSON a line each;
what the bridge itself has to say goes to stderr.
`

func stdioMain(args []string) int {
	fs := flag.NewFlagSet("stdio", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), stdioUsage)
		fs.PrintDefaults()
	}
	tokenEnv := fs.String("token-env", "TOYBOX_TOKEN", "the environment variable holding the vat's bearer token (unset or empty: none is sent)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitUsage
	}
	u, err := url.Parse(fs.Arg(0))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Fragment != "" {
		fmt.Fprintf(os.Stderr, "toybox stdio: %q: want the vat's endpoint, http(s)://host[:port]/<vat>/mcp\n", fs.Arg(0))
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b := &stdioBridge{endpoint: u.String(), token: os.Getenv(*tokenEnv), out: bufio.NewWriter(os.Stdout), client: &http.Client{}}
	if err := b.run(ctx, os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "toybox stdio:", term(err.Error()))
		return exitError
	}
	return exitOK
}

// stdioBridge carries one client's messages to endpoint and back.
type stdioBridge struct {
	endpoint, token string
	client          *http.Client

	outMu sync.Mutex
	out   *bufio.Writer

	mu      sync.Mutex
	session string        // Mcp-Session-Id, once initialize answered one
	version string        // the version initialize agreed on
	opening [][]byte      // the initialize the endpoint accepted and the initialized after it, to open a session again
	renewed chan struct{} // closed when a session replaces one the endpoint forgot

	renewing sync.Mutex // one new session at a time

	callsMu sync.Mutex
	calls   map[string]*inFlight // the requests under way, by id (callKey)
}

// inFlight is one request under way: posted, or waiting to be.
type inFlight struct {
	cancel context.CancelFunc // nil: not cancellable (an initialize)
}

// ask is a message the bridge posts, and for a request, its entry in
// calls: its answer is written only while the entry is there.
type ask struct {
	mcp.Msg
	f *inFlight
	// session is the Mcp-Session-Id an initialize's answer came with:
	// the session's only once the answer is a result.
	session string
}

// stdioInFlight bounds the requests posted at once: the client's others
// wait for a slot.
const stdioInFlight = 16

// run reads in until its end (the client closed it) or ctx's (a signal),
// then waits a little for the answers under way and ends the session.
func (b *stdioBridge) run(ctx context.Context, in io.Reader) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b.renewed = make(chan struct{})
	next := stdinLines(ctx, in)
	slots := make(chan struct{}, stdioInFlight)
	var wg sync.WaitGroup      // the messages under way
	var streams sync.WaitGroup // the session's GET stream, which stdin's end does not wait for
	var listening bool         // only the initialize calls, one after another, touch it
	// ready is closed once what came before may be followed: an
	// initialize is answered before anything after it goes, since what
	// follows carries the session it opens, and initialized is taken.
	ready := make(chan struct{})
	close(ready)
	for {
		line, err := next()
		if errors.Is(err, mcp.ErrTooLong) {
			fmt.Fprintf(os.Stderr, "toybox stdio: a message longer than %d bytes was dropped\n", mcp.MaxMessage)
			continue
		}
		if err != nil && (len(line) == 0 || !errors.Is(err, io.EOF)) {
			break
		}
		if len(bytes.TrimSpace(line)) > 0 {
			m, perr := mcp.Parse(line)
			if perr != nil {
				// As a stdio server would: an error with no id.
				b.write(mcp.ErrorResponse(nil, mcp.CodeParse, "toybox stdio: "+perr.Error(), nil))
			} else if m.Kind == mcp.KindRequest && b.inFlight(m.ID) {
				// JSON-RPC: an id is unique among the requests in
				// flight. Sent on, the endpoint would answer both
				// with one id, and a cancel would name either: the
				// one in flight keeps it.
				b.write(mcp.ErrorResponse(m.ID, mcp.CodeInvalidRequest, "toybox stdio: request id "+string(m.ID)+" is in flight already: an id names one request until its answer", nil))
			} else if m.Kind == mcp.KindRequest && m.Method == "initialize" {
				// Posted on its own, so that stdin is read on while
				// the endpoint takes its time: its end (the client
				// quit) still ends the bridge.
				// Its id is in flight as any request's. A client
				// never cancels it: the spec forbids it.
				a, untrack := b.track(m, nil)
				prev, answered := ready, make(chan struct{})
				ready = answered
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer close(answered)
					defer untrack()
					select {
					case <-prev:
					case <-ctx.Done():
						return
					}
					if b.initialized() {
						b.failWith(a, mcp.CodeInvalidRequest, "the endpoint accepted an initialize already: a client initializes once, and its server's session is open")
						return
					}
					b.post(ctx, a, true)
					if !listening && b.sessionID() != "" {
						listening = true
						streams.Add(1)
						go func() { defer streams.Done(); b.listen(ctx) }()
					}
				}()
			} else {
				if m.Method == "notifications/initialized" {
					b.remember(m)
				}
				// A request waits for a slot, and stdin is read on
				// meanwhile: the calls holding the slots may wait
				// for the client's answer to the server's own
				// request, which takes no slot. It is cancellable
				// from now: one cancelled before it goes never goes.
				// The client's answer to the server's own request
				// waits for no initialize: the server may ask while
				// it initializes (a ping).
				ctx, done := ctx, func() {}
				a := ask{Msg: m}
				if m.Kind == mcp.KindRequest {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(ctx)
					a, done = b.track(m, cancel)
				}
				gate := ready
				if m.Kind == mcp.KindResponse {
					gate = nil
				}
				// What follows initialized waits until the endpoint
				// took it: a client sends its first request at once,
				// and a server may refuse one before initialized.
				taken := func() {}
				if m.Method == "notifications/initialized" {
					ch := make(chan struct{})
					ready, taken = ch, func() { close(ch) }
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer taken()
					defer done()
					if gate != nil {
						select {
						case <-gate:
						case <-ctx.Done():
							return
						}
					}
					if m.Kind == mcp.KindRequest {
						select {
						case slots <- struct{}{}:
						case <-ctx.Done():
							return
						}
						defer func() { <-slots }()
						if ctx.Err() != nil {
							return
						}
					}
					b.post(ctx, a, true)
				}()
				if m.Method == "notifications/cancelled" {
					b.cancelCall(m)
				}
			}
		}
		if err != nil {
			break
		}
	}
	// The client is done: the answers under way get a moment, the
	// session's stream none.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	cancel()
	<-done
	streams.Wait()
	b.endSession()
	return nil
}

// stdinLines reads in a line at a time on its own, so that ctx's end (a
// signal) is not held up by a client that keeps stdin open: next returns
// the next line, or ctx's error once it ends.
func stdinLines(ctx context.Context, in io.Reader) (next func() ([]byte, error)) {
	type read struct {
		line []byte
		err  error
	}
	reads := make(chan read)
	go func() {
		lines := mcp.NewLineReader(in, 0)
		for {
			line, _, err := lines.Next()
			select {
			case reads <- read{bytes.Clone(line), err}:
			case <-ctx.Done():
				return
			}
			if err != nil && !errors.Is(err, mcp.ErrTooLong) {
				return
			}
		}
	}()
	return func() ([]byte, error) {
		select {
		case r := <-reads:
			return r.line, r.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (b *stdioBridge) sessionID() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.session
}

// request makes a request to the endpoint with the session's headers, and
// those a 2026-07-28 message mirrors from its body.
func (b *stdioBridge) request(ctx context.Context, method string, body []byte, m *mcp.Msg) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.endpoint, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if b.token != "" {
		req.Header.Set("Authorization", "Bearer "+b.token)
	}
	b.mu.Lock()
	session, version := b.session, b.version
	b.mu.Unlock()
	if session != "" {
		req.Header.Set(mcp.HeaderSession, session)
	}
	if m != nil {
		if v, ok := m.GetString("params", "_meta", mcp.MetaProtocolVersion); ok {
			version = v
			req.Header.Set(mcp.HeaderMethod, m.Method)
			if name, ok := mcp.NameOf(*m); ok {
				req.Header.Set(mcp.HeaderName, mcp.EncodeHeaderValue(name))
			}
		}
	}
	if version != "" {
		req.Header.Set(mcp.HeaderVersion, version)
	}
	return req, nil
}

// post sends one message and writes what answers it; if retry, once more
// in a new session when the endpoint forgot the one it was sent in.
func (b *stdioBridge) post(ctx context.Context, m ask, retry bool) {
	req, err := b.request(ctx, http.MethodPost, m.Raw, &m.Msg)
	if err != nil {
		b.fail(m, err.Error())
		return
	}
	resp, err := b.client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			b.fail(m, fmt.Sprintf("%s did not answer: %v", b.endpoint, err))
		}
		return
	}
	defer resp.Body.Close()
	if sent := req.Header.Get(mcp.HeaderSession); resp.StatusCode == http.StatusNotFound && sent != "" && retry && b.renew(ctx, sent) {
		b.post(ctx, m, false)
		return
	}
	if m.Method == "initialize" && resp.StatusCode/100 == 2 {
		m.session = resp.Header.Get(mcp.HeaderSession)
	}
	switch ct := resp.Header.Get("Content-Type"); {
	case resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusNoContent:
		if m.Kind == mcp.KindRequest {
			// What answers a notification leaves a request's
			// client waiting for ever.
			b.fail(m, fmt.Sprintf("%s answered %d, with no answer to request %s", b.endpoint, resp.StatusCode, m.ID))
		}
	case resp.StatusCode/100 != 2:
		b.refused(m, resp)
	case strings.HasPrefix(ct, "text/event-stream"):
		var last string
		answered := b.events(resp.Body, &last, m)
		resp.Body.Close()
		// A stream that ends before its answer is taken up again
		// from its last event (the server may close it to poll).
		for tries := 0; !answered && m.Kind == mcp.KindRequest && last != "" && tries < 3 && ctx.Err() == nil; tries++ {
			answered = b.resume(ctx, &last, m)
		}
		if !answered && ctx.Err() == nil {
			b.fail(m, fmt.Sprintf("the event stream from %s ended with no answer", b.endpoint))
		}
	default:
		body, err := io.ReadAll(io.LimitReader(resp.Body, mcp.MaxMessage+1))
		if err != nil {
			b.fail(m, fmt.Sprintf("reading the answer: %v", err))
			return
		}
		if answered, err := b.forward(body, m, false); err != nil {
			b.fail(m, fmt.Sprintf("%s answered with %v", b.endpoint, err))
		} else if !answered && m.Kind == mcp.KindRequest {
			b.fail(m, fmt.Sprintf("%s answered with no answer to request %s", b.endpoint, m.ID))
		}
	}
}

// forward writes one message the endpoint sent, and reports whether it
// answers asked; an initialize answer's version is the session's from
// then on. A message that is not JSON-RPC, a second answer to asked
// (answered), or an answer to a request the client cancelled, is not
// written: the error says why. The client is owed exactly one answer a
// request, and a line it cannot read may end its connection.
func (b *stdioBridge) forward(body []byte, asked ask, answered bool) (bool, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return false, nil
	}
	var line bytes.Buffer
	if err := json.Compact(&line, body); err != nil {
		return false, errors.New("a message that is not JSON")
	}
	am, err := mcp.Parse(line.Bytes())
	if err != nil {
		return false, fmt.Errorf("a message that is not JSON-RPC (%w)", err)
	}
	answers := am.Kind == mcp.KindResponse && asked.Kind == mcp.KindRequest && bytes.Equal(am.ID, asked.ID)
	if answers && answered {
		return false, fmt.Errorf("a second answer to request %s", asked.ID)
	}
	if answers && !b.settle(asked) {
		return false, fmt.Errorf("an answer to request %s, which the client cancelled", asked.ID)
	}
	if answers && asked.Method == "initialize" && am.Result() != nil {
		// The initialize the endpoint accepted is the one a new
		// session is opened with: one it refused is not, and the
		// session id its answer came with names no session.
		b.mu.Lock()
		if v, ok := am.GetString("result", "protocolVersion"); ok {
			b.version = v
		}
		b.session = asked.session
		b.opening = [][]byte{asked.Raw}
		b.mu.Unlock()
	}
	b.write(line.Bytes())
	return answers, nil
}

// resume takes up the stream of request m again after event lastID,
// and reports whether m was answered on it.
func (b *stdioBridge) resume(ctx context.Context, lastID *string, m ask) bool {
	req, err := b.request(ctx, http.MethodGet, nil, nil)
	if err != nil {
		return false
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(mcp.HeaderLastEvent, *lastID)
	if m.session != "" {
		// An initialize's stream, in the session its answer opens.
		req.Header.Set(mcp.HeaderSession, m.session)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return false
	}
	return b.events(resp.Body, lastID, m)
}

// events writes each event of an event stream, and reports whether one
// answered asked; lastID, if not nil, keeps the last event's id.
func (b *stdioBridge) events(r io.Reader, lastID *string, asked ask) (answered bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), mcp.MaxMessage+64)
	var data []string
	dispatch := func() {
		if len(data) == 0 {
			return
		}
		answers, err := b.forward([]byte(strings.Join(data, "\n")), asked, answered)
		if err != nil {
			fmt.Fprintf(os.Stderr, "toybox stdio: an event from %s was dropped: %s\n", b.endpoint, term(err.Error()))
		}
		answered = answered || answers
		data = data[:0]
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			dispatch()
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		case strings.HasPrefix(line, "id:") && lastID != nil:
			*lastID = strings.TrimPrefix(strings.TrimPrefix(line, "id:"), " ")
		}
	}
	dispatch()
	return answered
}

// refused answers a request the endpoint refused with the endpoint's own
// words: its JSON-RPC error's code and message when it sent one, else its
// status and text.
func (b *stdioBridge) refused(m ask, resp *http.Response) {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	code, text := mcp.CodeInternal, strings.TrimSpace(string(body))
	var answer struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &answer) == nil && len(answer.Error) > 0 {
		var rpc struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		var plain string
		switch {
		case json.Unmarshal(answer.Error, &rpc) == nil && rpc.Message != "":
			text = rpc.Message
			if rpc.Code != 0 {
				code = rpc.Code
			}
		case json.Unmarshal(answer.Error, &plain) == nil && plain != "":
			text = plain
		}
	}
	b.failWith(m, code, fmt.Sprintf("%s answered %d: %s", b.endpoint, resp.StatusCode, text))
}

// fail answers request m with an error saying why (a notification, an
// answer of the client's or a request it cancelled has none: stderr
// says it).
func (b *stdioBridge) fail(m ask, why string) { b.failWith(m, mcp.CodeInternal, why) }

func (b *stdioBridge) failWith(m ask, code int, why string) {
	if m.Kind != mcp.KindRequest || !b.settle(m) {
		fmt.Fprintf(os.Stderr, "toybox stdio: %s\n", term(why))
		return
	}
	b.write(mcp.ErrorResponse(m.ID, code, "toybox stdio: "+why, nil))
}

// write puts one message on stdout, a line of its own.
func (b *stdioBridge) write(msg []byte) {
	b.outMu.Lock()
	defer b.outMu.Unlock()
	_, _ = b.out.Write(msg)
	_ = b.out.WriteByte('\n')
	_ = b.out.Flush()
}

// listen carries what the server sends on its own (the session's GET
// stream) until ctx ends or the endpoint offers no such stream (405); a
// stream that breaks is asked for again, with the last event's id, and
// a session gone (404) waits for the one renew opens in its place.
func (b *stdioBridge) listen(ctx context.Context) {
	var last string
	wait := time.Second
	for ctx.Err() == nil {
		req, err := b.request(ctx, http.MethodGet, nil, nil)
		if err != nil {
			return
		}
		req.Header.Set("Accept", "text/event-stream")
		if last != "" {
			req.Header.Set(mcp.HeaderLastEvent, last)
		}
		resp, err := b.client.Do(req)
		switch {
		case err != nil:
		case resp.StatusCode == http.StatusMethodNotAllowed:
			resp.Body.Close()
			return
		case resp.StatusCode == http.StatusNotFound:
			// The session is gone: wait for one in its place.
			resp.Body.Close()
			b.mu.Lock()
			renewed := b.renewed
			b.mu.Unlock()
			last = ""
			select {
			case <-ctx.Done():
			case <-renewed:
			}
			continue
		case resp.StatusCode/100 == 2 && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"):
			wait = time.Second
			b.events(resp.Body, &last, ask{})
			resp.Body.Close()
		default:
			resp.Body.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
			wait = min(2*wait, 30*time.Second)
		}
	}
}

// callKey is the key of a request id in calls: its compact JSON, a
// string's spelled one way ("\u0061" is "a").
func callKey(id []byte) string {
	var s string
	if json.Unmarshal(id, &s) == nil {
		q, _ := json.Marshal(s)
		return string(q)
	}
	var compact bytes.Buffer
	if json.Compact(&compact, id) != nil {
		return string(id)
	}
	return compact.String()
}

// inFlight reports whether a request with id is under way.
func (b *stdioBridge) inFlight(id []byte) bool {
	b.callsMu.Lock()
	defer b.callsMu.Unlock()
	_, ok := b.calls[callKey(id)]
	return ok
}

// track enters request m in flight until done (or its answer), with
// cancel for a notifications/cancelled that names it. Only run's loop
// calls it, once inFlight said the id is free.
func (b *stdioBridge) track(m mcp.Msg, cancel context.CancelFunc) (_ ask, done func()) {
	key := callKey(m.ID)
	f := &inFlight{cancel: cancel}
	b.callsMu.Lock()
	defer b.callsMu.Unlock()
	if b.calls == nil {
		b.calls = map[string]*inFlight{}
	}
	b.calls[key] = f
	return ask{Msg: m, f: f}, func() {
		if cancel != nil {
			cancel()
		}
		b.callsMu.Lock()
		defer b.callsMu.Unlock()
		if b.calls[key] == f {
			delete(b.calls, key)
		}
	}
}

// settle takes request a out of flight as its answer is written, and
// reports whether it was still in flight: the answer to one the client
// cancelled (whose id it may have sent again since) is not written.
func (b *stdioBridge) settle(a ask) bool {
	if a.f == nil {
		return true
	}
	b.callsMu.Lock()
	defer b.callsMu.Unlock()
	key := callKey(a.ID)
	if b.calls[key] != a.f {
		return false
	}
	delete(b.calls, key)
	return true
}

// cancelCall closes the stream of the request a notifications/cancelled
// names: that is how a 2026-07-28 server learns it, and a 2025 server's
// answer would be dropped by the client anyway. Its id is free from
// then on.
func (b *stdioBridge) cancelCall(m mcp.Msg) {
	id, ok := m.Get("params", "requestId")
	if !ok {
		return
	}
	b.callsMu.Lock()
	defer b.callsMu.Unlock()
	key := callKey(id)
	if f, ok := b.calls[key]; ok && f.cancel != nil {
		f.cancel()
		delete(b.calls, key)
	}
}

// initialized reports whether the endpoint accepted an initialize.
func (b *stdioBridge) initialized() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.opening) > 0
}

// remember keeps the client's first initialized after the initialize
// the endpoint accepted, to open a session again.
func (b *stdioBridge) remember(m mcp.Msg) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.opening) == 1 {
		b.opening = append(b.opening, m.Raw)
	}
}

// renew opens a new session in place of gone, which the endpoint forgot
// (it answered 404: a vat restarted, or its session expired), with the
// client's own initialize and initialized; the client, whose stdio
// server never went, cannot. It reports whether a new session is open.
func (b *stdioBridge) renew(ctx context.Context, gone string) bool {
	b.renewing.Lock()
	defer b.renewing.Unlock()
	b.mu.Lock()
	session, opening := b.session, b.opening
	b.mu.Unlock()
	if session != gone {
		return session != "" // another call renewed it meanwhile
	}
	if len(opening) == 0 {
		return false
	}
	b.mu.Lock()
	b.session = ""
	b.mu.Unlock()
	ok := false
	defer func() {
		if !ok { // the next 404 tries again
			b.mu.Lock()
			b.session = gone
			b.mu.Unlock()
		}
	}()
	for i, msg := range opening {
		req, err := b.request(ctx, http.MethodPost, msg, nil)
		if err != nil {
			return false
		}
		resp, err := b.client.Do(req)
		if err != nil {
			return false
		}
		accepted := resp.StatusCode/100 == 2
		if i == 0 {
			// A 200 whose answer is an error opened no session.
			accepted = accepted && initAccepted(resp, msg)
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, mcp.MaxMessage))
		resp.Body.Close()
		if !accepted {
			return false
		}
		if i == 0 {
			b.mu.Lock()
			b.session = resp.Header.Get(mcp.HeaderSession)
			b.mu.Unlock()
		}
	}
	fmt.Fprintf(os.Stderr, "toybox stdio: %s forgot the session: a new one is open\n", b.endpoint)
	b.mu.Lock()
	close(b.renewed)
	b.renewed = make(chan struct{})
	b.mu.Unlock()
	ok = true
	return true
}

// initAccepted reports whether resp, the answer to initialize raw, holds
// its result: as JSON, or as an event of a stream.
func initAccepted(resp *http.Response, raw []byte) bool {
	init, err := mcp.Parse(raw)
	if err != nil {
		return false
	}
	body := io.LimitReader(resp.Body, mcp.MaxMessage+64)
	answers := func(data []byte) bool {
		m, err := mcp.Parse(bytes.TrimSpace(data))
		return err == nil && m.Kind == mcp.KindResponse && bytes.Equal(m.ID, init.ID) && m.Result() != nil
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		data, err := io.ReadAll(body)
		return err == nil && answers(data)
	}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), mcp.MaxMessage+64)
	var data []string
	for sc.Scan() {
		switch line := sc.Text(); {
		case line == "":
			if answers([]byte(strings.Join(data, "\n"))) {
				return true
			}
			data = data[:0]
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	return answers([]byte(strings.Join(data, "\n")))
}

// endSession ends the session the endpoint opened, if it did.
func (b *stdioBridge) endSession() {
	if b.sessionID() == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := b.request(ctx, http.MethodDelete, nil, nil)
	if err != nil {
		return
	}
	if resp, err := b.client.Do(req); err == nil {
		resp.Body.Close()
	}
}
