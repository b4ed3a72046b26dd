package doors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"toybox/schema"
)

// Bounds on the headers of one call.
const (
	maxHeaders     = 64
	maxHeaderBytes = 64 << 10
)

// dropped request headers: hop-by-hop headers, what the transport sets
// itself, and what would let a vat speak for someone else. Compared in
// canonical form.
var droppedRequest = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Proxy-Authenticate": true, "Proxy-Authorization": true, "Te": true,
	"Trailer": true, "Trailers": true, "Transfer-Encoding": true, "Upgrade": true,
	"Host": true, "Content-Length": true,
	// What many frameworks read as another method or path than the
	// request's: a door is one exact method and path.
	"X-Http-Method": true, "X-Http-Method-Override": true, "X-Method-Override": true,
	"X-Original-Method": true, "X-Original-Url": true, "X-Rewrite-Url": true,
	"X-Override-Url": true,
}

// droppedResponse: hop-by-hop headers of the backend's answer.
var droppedResponse = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Proxy-Authenticate": true, "Te": true, "Trailer": true, "Trailers": true,
	"Transfer-Encoding": true, "Upgrade": true,
}

// VatHeader names the request header that tells the backend which vat is
// calling. The supervisor sets it; a value the vat sends is dropped.
const VatHeader = "X-Toybox-Vat"

// dropRequestHeader: hop-by-hop and override headers, and what would let
// a vat speak for someone else (ForgedIdentity).
func dropRequestHeader(canon string) bool {
	return droppedRequest[canon] || ForgedIdentity(canon)
}

// identity names what servers behind a proxy take as the caller's identity
// or address (set by the proxy, an authenticating proxy or a CDN), and any
// X-Auth-Request-* (oauth2-proxy), X-Forwarded-* and X-Toybox-* (the
// supervisor's own).
var identity = map[string]bool{
	"Forwarded": true, "X-Real-Ip": true,
	"Remote-User": true, "X-Remote-User": true, "True-Client-Ip": true, "Cf-Connecting-Ip": true,
	"X-Client-Ip": true, "X-Cluster-Client-Ip": true, "Fastly-Client-Ip": true,
}

// ForgedIdentity reports whether a request header named canon (canonical
// form) says who the caller is or where it came from, as a front sets it:
// one a caller sends itself is never passed on (a vat's to a door
// backend, a visitor's to a vat). So is any name with a character other
// than a letter, a digit or '-': CGI, WSGI, PHP and others turn '_', '.'
// and the like into '_', so X_Forwarded_For and X.Toybox.Vat reach them as
// X-Forwarded-For and X-Toybox-Vat (nginx drops names with an underscore
// by default too).
func ForgedIdentity(canon string) bool {
	return identity[canon] || strings.HasPrefix(canon, "X-Toybox-") || strings.HasPrefix(canon, "X-Forwarded-") ||
		strings.HasPrefix(canon, "X-Auth-Request-") ||
		strings.ContainsFunc(canon, func(r rune) bool {
			return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '-'
		})
}

// doorRequest is one call, copied out of the Cap'n Proto message.
type doorRequest struct {
	method, path string
	header       http.Header
	body         []byte
}

// outcome is what a call came to, for its log record.
type outcome struct {
	status int
	reason string // details for the log only, beyond the error the vat sees
}

func (d *doorServer) Call(ctx context.Context, call schema.Door_call) error {
	start := time.Now()
	req, err := d.read(call.Args())
	var out outcome
	if err == nil {
		err = d.admit(req)
	}
	forwarded := false
	if err == nil {
		select {
		case d.g.sem <- struct{}{}:
			if err = d.g.enter(); err == nil {
				call.Go() // a slow backend must not hold up the vat's other calls
				forwarded = true
				out, err = d.forward(ctx, call, req)
				d.g.calls.Done()
			}
			<-d.g.sem
		default:
			err = fmt.Errorf("%w: %d calls of vat %s are already in flight", ErrRefused, d.g.limits.MaxInFlight, d.g.vat)
		}
	}
	if err != nil {
		// The record's status is what the vat received: none. What the
		// backend said goes into the reason.
		var detail []string
		if out.status != 0 {
			detail = append(detail, fmt.Sprintf("backend answered %d", out.status))
		}
		if out.reason != "" {
			detail = append(detail, out.reason)
		}
		out.status, out.reason = 0, err.Error()
		if len(detail) > 0 {
			out.reason += " (" + strings.Join(detail, "; ") + ")"
		}
	}
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelWarn
	}
	// Refused before the backend, or reached it: each kind against its
	// own count; the record written carries both counts.
	kind, other := d.g.refusals, d.g.allowed
	if forwarded {
		kind, other = d.g.allowed, d.g.refusals
	}
	ok, n := kind.Admit(time.Now())
	if !ok {
		return err // counted: the next record says how many
	}
	unlogged, unloggedAllowed := n, other.Drain()
	if forwarded {
		unlogged, unloggedAllowed = unloggedAllowed, unlogged
	}
	attrs := []slog.Attr{
		slog.String(keyVat, d.g.vat),
		slog.String(keyDoor, d.name),
		slog.String(keyMethod, clip(req.method)),
		slog.String(keyPath, clip(req.path)),
		slog.Int(keyStatus, out.status),
		slog.Int64(keyDurationMS, time.Since(start).Milliseconds()),
		slog.String(keyReason, out.reason),
	}
	if unlogged > 0 {
		attrs = append(attrs, slog.Int(keyUnlogged, unlogged))
	}
	if unloggedAllowed > 0 {
		attrs = append(attrs, slog.Int(keyUnloggedAllowed, unloggedAllowed))
	}
	d.g.logger.LogAttrs(context.Background(), level, "door call", attrs...)
	return err
}

// read copies the call's arguments, refusing oversized or malformed ones.
func (d *doorServer) read(args schema.Door_call_Params) (doorRequest, error) {
	var r doorRequest
	var err error
	if r.method, err = args.Method(); err != nil {
		return r, fmt.Errorf("%w: reading the method: %w", ErrRefused, err)
	}
	if r.path, err = args.Path(); err != nil {
		return r, fmt.Errorf("%w: reading the path: %w", ErrRefused, err)
	}
	hl, err := args.Headers()
	if err != nil {
		return r, fmt.Errorf("%w: reading the headers: %w", ErrRefused, err)
	}
	if hl.Len() > maxHeaders {
		return r, fmt.Errorf("%w: %d headers; at most %d", ErrRefused, hl.Len(), maxHeaders)
	}
	r.header = http.Header{}
	size := 0
	// Headers named in a Connection header are hop-by-hop too (RFC 9110
	// 7.6.1): find them first, drop them below.
	named := map[string]bool{}
	for i := 0; i < hl.Len(); i++ {
		if name, err := hl.At(i).Name(); err == nil && http.CanonicalHeaderKey(name) == "Connection" {
			value, _ := hl.At(i).Value()
			for _, f := range strings.Split(value, ",") {
				if f = strings.TrimSpace(f); f != "" {
					named[http.CanonicalHeaderKey(f)] = true
				}
			}
		}
	}
	for i := 0; i < hl.Len(); i++ {
		name, err := hl.At(i).Name()
		if err != nil {
			return r, fmt.Errorf("%w: reading header %d: %w", ErrRefused, i, err)
		}
		value, err := hl.At(i).Value()
		if err != nil {
			return r, fmt.Errorf("%w: reading header %d: %w", ErrRefused, i, err)
		}
		size += len(name) + len(value)
		if size > maxHeaderBytes {
			return r, fmt.Errorf("%w: the headers are larger than %d bytes", ErrRefused, maxHeaderBytes)
		}
		if !httpguts.ValidHeaderFieldName(name) {
			return r, fmt.Errorf("%w: %q is not a valid header name", ErrRefused, clip(name))
		}
		if !httpguts.ValidHeaderFieldValue(value) {
			return r, fmt.Errorf("%w: header %s has an invalid value", ErrRefused, name)
		}
		canon := http.CanonicalHeaderKey(name)
		if dropRequestHeader(canon) || named[canon] {
			continue
		}
		r.header.Add(canon, value)
	}
	body, err := args.Body()
	if err != nil {
		return r, fmt.Errorf("%w: reading the body: %w", ErrRefused, err)
	}
	if len(body) > d.g.limits.MaxRequestBody {
		return r, fmt.Errorf("%w: the request body is %d bytes; at most %d", ErrRefused, len(body), d.g.limits.MaxRequestBody)
	}
	r.body = bytes.Clone(body)
	return r, nil
}

// admit decides the call: the grant stands, the target cannot be rewritten,
// and the method and path are exactly one of this Door's entries.
func (d *doorServer) admit(r doorRequest) error {
	if err := d.g.live(); err != nil {
		return err
	}
	if why := methodProblem(r.method); why != "" {
		return fmt.Errorf("%w: %s", ErrRefused, why)
	}
	if why := targetProblem(r.path); why != "" {
		return fmt.Errorf("%w: %s", ErrRefused, why)
	}
	for _, e := range d.entries {
		if e.Method == r.method && e.Path == r.path {
			return nil
		}
	}
	return fmt.Errorf("%w: %s %s is not one of this door's entries (%s)", ErrRefused, clip(r.method), clip(r.path), strings.Join(entryNames(d.entries), ", "))
}

func entryNames(es []Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name()
	}
	return out
}

// forward sends an admitted call to the backend and fills the results.
func (d *doorServer) forward(ctx context.Context, call schema.Door_call, r doorRequest) (outcome, error) {
	g := d.g
	ctx, cancel := context.WithTimeout(ctx, g.limits.Timeout)
	defer cancel()
	stop := context.AfterFunc(g.ctx, cancel) // revocation ends the call
	defer stop()
	if err := g.live(); err != nil {
		return outcome{}, err // revoked since admitted: AfterFunc's cancel may not have run yet
	}

	host := "localhost"
	if g.set.Backend.Network == "tcp" {
		host = g.set.Backend.Address
	}
	var body io.Reader
	if len(r.body) > 0 {
		body = bytes.NewReader(r.body)
	}
	// The path passed targetProblem: only unreserved, sub-delims, ':', '@'
	// and '/', so the URL is exactly host + path and nothing is re-encoded.
	hreq, err := http.NewRequestWithContext(ctx, r.method, "http://"+host+r.path, body)
	if err != nil {
		return outcome{}, fmt.Errorf("%w: building the request: %w", ErrRefused, err)
	}
	hreq.Header = r.header
	hreq.Header.Set(VatHeader, g.vat)
	hreq.Host = host

	resp, err := g.tr.RoundTrip(hreq)
	if err != nil {
		return outcome{reason: err.Error()}, d.failure(ctx, "the backend is unreachable or broke off")
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, int64(g.limits.MaxResponseBody)+1))
	if err != nil {
		return outcome{status: resp.StatusCode, reason: err.Error()}, d.failure(ctx, "reading the backend's answer failed")
	}
	if len(data) > g.limits.MaxResponseBody {
		err := fmt.Errorf("%w: the backend's answer is larger than %d bytes", ErrFailed, g.limits.MaxResponseBody)
		return outcome{status: resp.StatusCode}, err
	}
	if err := g.live(); err != nil {
		return outcome{status: resp.StatusCode}, err
	}
	if resp.StatusCode < 100 || resp.StatusCode > 599 {
		return outcome{status: resp.StatusCode}, fmt.Errorf("%w: the backend answered status %d", ErrFailed, resp.StatusCode)
	}

	res, err := call.AllocResults()
	if err != nil {
		return outcome{status: resp.StatusCode}, err
	}
	res.SetStatus(uint16(resp.StatusCode))
	named := map[string]bool{} // headers the backend's Connection names
	for _, v := range resp.Header["Connection"] {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				named[http.CanonicalHeaderKey(f)] = true
			}
		}
	}
	var names []string
	for k := range resp.Header {
		if !droppedResponse[k] && !named[k] {
			names = append(names, k)
		}
	}
	n := 0
	for _, k := range names {
		n += len(resp.Header[k])
	}
	sort.Strings(names)
	hl, err := res.NewHeaders(int32(n))
	if err != nil {
		return outcome{status: resp.StatusCode}, err
	}
	i := 0
	for _, k := range names {
		for _, v := range resp.Header[k] {
			if err := hl.At(i).SetName(k); err != nil {
				return outcome{status: resp.StatusCode}, err
			}
			if err := hl.At(i).SetValue(v); err != nil {
				return outcome{status: resp.StatusCode}, err
			}
			i++
		}
	}
	if err := res.SetBody(data); err != nil {
		return outcome{status: resp.StatusCode}, err
	}
	return outcome{status: resp.StatusCode}, nil
}

// failure turns a backend error into what the vat sees: revoked, timed out,
// or failed. The details go only to the log.
func (d *doorServer) failure(ctx context.Context, what string) error {
	if err := d.g.live(); err != nil {
		return err
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: the backend did not answer within %s", ErrFailed, d.g.limits.Timeout)
	}
	return fmt.Errorf("%w: %s", ErrFailed, what)
}
