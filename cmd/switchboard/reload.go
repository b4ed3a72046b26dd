package main

import (
	"encoding/json"
	"log/slog"
	"os"

	"github.com/coreos/go-systemd/v22/daemon"

	"toybox/switchboard"
)

// reload reads the config file again (SIGHUP, systemctl reload) and gives
// the running server its new deny list: connections it now refuses are
// shut. Every other key takes effect when the switchboard restarts, and
// the log says which changed. A file that cannot be read or parsed keeps
// the deny list in force, loudly.
func reload(srv *switchboard.Server, path string, started *switchboard.File, log *slog.Logger) {
	_, _ = daemon.SdNotify(false, daemon.SdNotifyReloading)
	defer func() { _, _ = daemon.SdNotify(false, daemon.SdNotifyReady) }()
	if path == "" {
		log.Warn("SIGHUP: no --config file to read again; nothing changed")
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		log.Error("reloading the config: the deny list in force stays", "config", path, "error", err.Error())
		return
	}
	file, err := switchboard.ParseFile(data)
	if err != nil {
		log.Error("reloading the config: the deny list in force stays", "config", path, "error", err.Error())
		return
	}
	cfg, err := file.Config(nil, nil)
	if err != nil {
		log.Error("reloading the config: the deny list in force stays", "config", path, "error", err.Error())
		return
	}
	shut, err := srv.Reload(switchboard.Policy{Deny: cfg.Deny, DenyNames: cfg.DenyNames})
	if err != nil {
		log.Error("reloading the deny list", "error", err.Error())
		return
	}
	if rest := restartOnly(started, file); len(rest) > 0 {
		log.Warn("config keys changed that take effect only when the switchboard restarts", "keys", rest)
	}
	log.Info("config reloaded", "config", path, "shut", shut)
}

// restartOnly lists the keys other than deny whose values differ between
// the file the switchboard started with and the new one.
func restartOnly(old, cur *switchboard.File) []string {
	a, b := keyed(old), keyed(cur)
	var out []string
	for _, k := range []string{"sockets", "publicNames", "resolver", "rootCAs", "limits", "threads", "owner"} {
		if string(a[k]) != string(b[k]) {
			out = append(out, k)
		}
	}
	return out
}

func keyed(f *switchboard.File) map[string]json.RawMessage {
	m := map[string]json.RawMessage{}
	if f == nil {
		return m
	}
	b, _ := json.Marshal(f)
	_ = json.Unmarshal(b, &m)
	return m
}
