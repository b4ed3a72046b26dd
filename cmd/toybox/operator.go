package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/netutil"

	"toybox/vat/activity"
	"toybox/vat/grant"
	"toybox/vat/notices"
	"toybox/vat/reach"
	"toybox/vat/supervisor"
	"toybox/vat/switches"
	"toybox/vat/ui"
	"toybox/vat/words"
)

// operatorView is what toybox serve shows the operator: the status page
// and metrics (package ui), the recent activity behind them and this
// boot's notices.
type operatorView struct {
	activity *activity.Recorder
	notices  *notices.Center
	ui       *ui.UI
	status   *http.Server // the --status listener, if asked for
}

// noticeSink is the sink --notice-command or --notice-webhook names (nil:
// none, the log and the page only).
func noticeSink(command, webhook string) (notices.Sink, error) {
	switch {
	case command != "" && webhook != "":
		return nil, errors.New("--notice-command and --notice-webhook: give one")
	case command != "":
		f := strings.Fields(command)
		return notices.Command{Path: f[0], Args: f[1:]}, nil
	case webhook != "":
		return notices.NewWebhook(webhook)
	}
	return nil, nil
}

// adminHandler is the admin socket's handler: the page's routes beside
// the supervisor's admin API, both behind ui.AdminGuard.
func (o *operatorView) adminHandler(sup *supervisor.Supervisor) http.Handler {
	mux := http.NewServeMux()
	o.ui.Mount(mux)
	mux.Handle("/", sup.AdminHandler())
	return ui.AdminGuard(mux)
}

// listenStatus starts the --status listener on addr (loopback only), its
// credential the token in <state>/status.token.
func (o *operatorView) listenStatus(addr, state string, log *slog.Logger, errc chan<- error) error {
	if err := ui.CheckStatusAddr(addr); err != nil {
		return err
	}
	token, err := ui.LoadToken(state)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("status listener: %w", err)
	}
	// Bounded as the public listener is (its guard, an idle timeout):
	// any local user can connect to it, token or not.
	guard := supervisor.NewStatusGuard()
	o.status = &http.Server{
		Handler: o.ui.StatusHandler(addr, token), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idleTimeout,
		ConnState: guard.ConnState, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() { errc <- o.status.Serve(guard.Listener(netutil.LimitListener(l, supervisor.MaxStatusConns))) }()
	log.Info("status page listening", "status", addr, "token_file", state+"/"+ui.TokenFile)
	return nil
}

// bootNotices sends this boot's notices once every vat's first launch has
// settled (none is starting), or after wait at most.
func (o *operatorView) bootNotices(ctx context.Context, sup *supervisor.Supervisor, wait time.Duration) {
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		starting := false
		for _, st := range sup.List() {
			if st.Word() == words.Starting {
				starting = true
			}
		}
		if !starting {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	var vats []notices.Vat
	for _, st := range sup.List() {
		nv := notices.Vat{ID: string(st.ID), Word: st.Word(), Detail: st.WordDetail(), DetailES: st.WordDetailES()}
		if len(st.Grant) == 0 {
			nv.Reach = notices.Text{EN: words.PageNoGrant.In("en"), ES: words.PageNoGrant.In("es")}
		} else {
			nv.Reach = notices.Text{EN: reach.Grants(st.Grant, "en"), ES: reach.Grants(st.Grant, "es")}
		}
		vats = append(vats, nv)
	}
	o.notices.Boot(ctx, vats)
}

// newOperatorView makes the view; its UI is made once the supervisor is.
func newOperatorView(sw *switches.Switches, sink notices.Sink, log *slog.Logger) *operatorView {
	return &operatorView{activity: activity.New(), notices: notices.New(notices.Config{Switches: sw, Sink: sink, Logger: log})}
}

func (o *operatorView) makeUI(sup *supervisor.Supervisor, sw *switches.Switches, up *grant.Upstream, wallTmp int64, log *slog.Logger) error {
	u, err := ui.New(ui.Config{
		Supervisor: sup, Activity: o.activity, Notices: o.notices, Switches: sw, Upstream: up,
		WallTmpBytes: wallTmp, Logger: log,
	})
	o.ui = u
	return err
}
