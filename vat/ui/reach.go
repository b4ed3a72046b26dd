package ui

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"toybox/labels"
	"toybox/vat/reach"
	"toybox/vat/supervisor"
)

// ReachAnswer is what GET /<vat>/reach answers: "what can this vat reach,
// and why", one sentence a line, in the asked language.
type ReachAnswer struct {
	ID    string   `json:"id"`
	Lines []string `json:"lines"`
}

func (u *UI) reachOf(w http.ResponseWriter, r *http.Request) {
	// The path is where the id enters. Text that is no vat id names no
	// vat: the same 404 as an id that is not installed.
	st, err := supervisor.Status{}, fmt.Errorf("%w: %q", supervisor.ErrNoVat, r.PathValue("vat"))
	if id, perr := labels.ParseVatID(r.PathValue("vat")); perr == nil {
		st, err = u.cfg.Supervisor.Status(id)
	}
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, supervisor.ErrNoVat) {
			code = http.StatusNotFound
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	lang := langOf(r)
	h := u.host(r.Context(), lang)
	lines := reach.Explain(u.reachFacts(r.Context(), st, h), lang)
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(ReachAnswer{ID: string(st.ID), Lines: lines})
}
