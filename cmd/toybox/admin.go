package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// admin talks to the supervisor's admin socket.
type admin struct {
	c *http.Client
}

// newAdmin is a client of the admin socket at path. timeout bounds each
// request (a package install resolves and fetches: minutes).
func newAdmin(path string, timeout time.Duration) admin {
	return admin{c: &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}}
}

// do sends one request; the answer's body is returned with its status.
func (a admin) do(method, path string, body io.Reader) (int, []byte, error) {
	return a.doWith(method, path, nil, body)
}

// doWith is do with the request's headers h.
func (a admin) doWith(method, path string, h http.Header, body io.Reader) (int, []byte, error) {
	req, err := http.NewRequest(method, "http://toybox"+path, body)
	if err != nil {
		return 0, nil, err
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := a.c.Do(req)
	if err != nil {
		// Go's error quotes the request's URL, whose query may carry
		// the owner's env values (?env=): name the path only.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			ue.URL = req.URL.Path
		}
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, b, err
}

// adminError is the error an admin answer carries, or the body itself,
// rendered for the terminal (term): a refusal may quote what a package
// or a vat wrote.
func adminError(status int, body []byte) error {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return fmt.Errorf("%d: %s", status, term(e.Error))
	}
	return fmt.Errorf("%d: %s", status, term(strings.TrimSpace(string(body))))
}

// installAnswer reads the answer to PUT /<vat>: the vat's status for 201
// (installed), 200 (upgraded) and a 503 that carries one (installed, but
// off); the refusal otherwise. A 503 that carries an error installed
// nothing: the supervisor was stopping.
func installAnswer(status int, body []byte) (map[string]any, error) {
	if status != http.StatusCreated && status != http.StatusOK && status != http.StatusServiceUnavailable {
		return nil, adminError(status, body)
	}
	var st map[string]any
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("reading the answer (%d): %w", status, err)
	}
	if _, ok := st["status"]; !ok {
		return nil, adminError(status, body)
	}
	return st, nil
}
