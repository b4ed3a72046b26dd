package notices

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Sink delivers a notice to where the operator reads it.
type Sink interface {
	Deliver(ctx context.Context, n Notice) error
}

// deliverTimeout bounds one delivery: a sink that hangs delays nothing
// else for longer.
const deliverTimeout = 10 * time.Second

// Command is a sink that runs a program for each notice, with the notice
// as JSON on its standard input and TOYBOX_NOTICE_KIND and
// TOYBOX_NOTICE_TITLE set. Exit status 0 is delivered.
type Command struct {
	// Path is the program; Args its arguments.
	Path string
	Args []string
}

// Deliver runs the command.
func (c Command) Deliver(ctx context.Context, n Notice) error {
	b, err := json.Marshal(n)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, deliverTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Path, c.Args...)
	cmd.Stdin = bytes.NewReader(b)
	// The operator's command runs with toybox's environment and the
	// notice's kind and title.
	cmd.Env = append(os.Environ(), //nolint:forbidigo // passed on, not read
		"TOYBOX_NOTICE_KIND="+string(n.Kind), "TOYBOX_NOTICE_TITLE="+n.Title.EN)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 300 {
			msg = msg[len(msg)-300:]
		}
		if msg != "" {
			return fmt.Errorf("notice command %s: %w: %s", c.Path, err, msg)
		}
		return fmt.Errorf("notice command %s: %w", c.Path, err)
	}
	return nil
}

// Webhook is a sink that POSTs each notice as JSON to a URL on loopback.
type Webhook struct {
	url    string
	client *http.Client
}

// NewWebhook returns a Webhook for raw, which must be an http URL whose
// host is a loopback address or localhost: toybox reaches no other
// network (under systemd it has none), and a notice must not leave the
// computer by this way. Every address dialled is checked again.
func NewWebhook(raw string) (*Webhook, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("notice webhook %q: %w", raw, err)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("notice webhook %q: want an http:// URL on loopback", raw)
	}
	if u.User != nil {
		return nil, fmt.Errorf("notice webhook %q: no user:password in the URL", raw)
	}
	h := u.Hostname()
	if a, err := netip.ParseAddr(h); (err != nil || !a.Unmap().IsLoopback()) && h != "localhost" {
		return nil, fmt.Errorf("notice webhook %q: the host must be a loopback address or localhost", raw)
	}
	d := &net.Dialer{Timeout: 5 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil || !ap.Addr().Unmap().IsLoopback() {
			return fmt.Errorf("notice webhook: %s is not a loopback address", address)
		}
		return nil
	}}
	tr := &http.Transport{DialContext: d.DialContext, Proxy: nil, DisableKeepAlives: true}
	return &Webhook{url: u.String(), client: &http.Client{Transport: tr, Timeout: deliverTimeout, CheckRedirect: func(*http.Request, []*http.Request) error {
		return errors.New("notice webhook: redirects are not followed")
	}}}, nil
}

// Deliver POSTs the notice. A 2xx answer is delivered.
func (w *Webhook) Deliver(ctx context.Context, n Notice) error {
	b, err := json.Marshal(n)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(req)
	if err != nil {
		return fmt.Errorf("notice webhook: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("notice webhook: %s answered %s", w.url, resp.Status)
	}
	return nil
}
