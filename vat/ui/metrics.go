package ui

import (
	"bufio"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"toybox/vat/activity"
	"toybox/vat/words"
)

// metrics writes the Prometheus text exposition format (version 0.0.4),
// by hand: a handful of families, with nothing a client library would add
// but a dependency.
func (u *UI) metrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff") // vat ids are in it
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	m := &promWriter{w: bw}

	m.family("toybox_egress_decisions_total", "counter", "Egress calls of each vat (connect, request, webSocket), by outcome (allowed, refused, failed) and a fixed class of the reason.")
	for _, d := range u.cfg.Activity.Decisions() {
		m.sample("toybox_egress_decisions_total", float64(d.N), "vat", d.Vat, "outcome", d.Outcome, "reason", d.Reason)
	}

	vats := u.cfg.Supervisor.List()
	m.family("toybox_vats", "gauge", "Installed vats by status word (English).")
	byWord := map[words.Word]int{}
	for _, st := range vats {
		byWord[st.Word()]++
	}
	for _, wd := range words.All() {
		m.sample("toybox_vats", float64(byWord[wd]), "status", wd.String())
	}
	m.family("toybox_vat_restarts", "gauge", "Restarts of each vat since its last install, upgrade or restart by the owner.")
	for _, st := range vats {
		m.sample("toybox_vat_restarts", float64(st.Restarts), "vat", string(st.ID))
	}
	m.family("toybox_vat_up", "gauge", "1 when the vat serves (its word is a serving one), else 0.")
	for _, st := range vats {
		up := 0.0
		if st.Word().Serving() {
			up = 1
		}
		m.sample("toybox_vat_up", up, "vat", string(st.ID))
	}
	m.family("toybox_egress_relayed_connections", "gauge", "Connections of each vat's app the supervisor relays now. Connections toybox-entry holds itself are the switchboard's to count.")
	for _, st := range vats {
		m.sample("toybox_egress_relayed_connections", float64(u.cfg.Supervisor.RelayedSockets(st.ID)), "vat", string(st.ID))
	}
	preparing, waiting := u.cfg.Supervisor.Installs()
	m.family("toybox_package_installs", "gauge", "Package installs preparing now and waiting their turn (toybox serve --installs, --install-queue); past the queue an install gets 429.")
	m.sample("toybox_package_installs", float64(preparing), "state", "preparing")
	m.sample("toybox_package_installs", float64(waiting), "state", "waiting")
	m.histograms("toybox_vat_spawn_duration_seconds", "Time from launching a vat to its app listening, by whether it did.", u.cfg.Activity.SpawnDurations())
	m.histograms("toybox_vat_install_duration_seconds", "Time of an install or upgrade, from the first byte of its code to its answer, by whether it ended serving.", u.cfg.Activity.InstallDurations())

	m.family("toybox_notices_total", "counter", "Notices sent this boot, by kind and whether they were delivered.")
	counts := map[[2]string]int{}
	for _, n := range u.cfg.Notices.List() {
		counts[[2]string{string(n.Kind), strconv.FormatBool(n.Delivered)}]++
	}
	keys := make([][2]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i][0]+keys[i][1] < keys[j][0]+keys[j][1] })
	for _, k := range keys {
		m.sample("toybox_notices_total", float64(counts[k]), "kind", k[0], "delivered", k[1])
	}

	up := 0.0
	if u.cfg.Upstream != nil && u.host(r.Context(), "en").SwitchboardUp {
		up = 1
	}
	m.family("toybox_switchboard_up", "gauge", "1 when the supervisor's switchboard answers.")
	m.sample("toybox_switchboard_up", up)
}

type promWriter struct{ w *bufio.Writer }

func (m *promWriter) family(name, typ, help string) {
	fmt.Fprintf(m.w, "# HELP %s %s\n# TYPE %s %s\n", name, escapeHelp(help), name, typ)
}

// sample writes one sample; kv are label names and values in turn.
func (m *promWriter) sample(name string, v float64, kv ...string) {
	m.w.WriteString(name)
	if len(kv) > 0 {
		m.w.WriteByte('{')
		for i := 0; i+1 < len(kv); i += 2 {
			if i > 0 {
				m.w.WriteByte(',')
			}
			fmt.Fprintf(m.w, "%s=\"%s\"", kv[i], escapeLabel(kv[i+1]))
		}
		m.w.WriteByte('}')
	}
	m.w.WriteByte(' ')
	m.w.WriteString(formatValue(v))
	m.w.WriteByte('\n')
}

func (m *promWriter) histograms(name, help string, hs map[bool]activity.Histogram) {
	m.family(name, "histogram", help)
	for _, ok := range []bool{true, false} {
		h := hs[ok]
		res := "ok"
		if !ok {
			res = "failed"
		}
		for i, b := range h.Bounds {
			m.sample(name+"_bucket", float64(h.Counts[i]), "result", res, "le", formatValue(b))
		}
		m.sample(name+"_bucket", float64(h.Count), "result", res, "le", "+Inf")
		m.sample(name+"_sum", h.Sum, "result", res)
		m.sample(name+"_count", float64(h.Count), "result", res)
	}
}

func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
