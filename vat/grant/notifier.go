package grant

import (
	"strings"
	"sync"

	"toybox/schema"
)

// NotifierReport is what toybox-entry said, in its egress() call, its wall
// got for transparent egress: whether it asked for a connect() listener,
// whether the kernel gave it, and why not.
type NotifierReport struct {
	Asked     bool
	Installed bool
	Why       string
}

// maxWhy bounds the reason kept from a report (the entry's, read as text).
const maxWhy = 512

// notifierReport holds the entry's report, once it came.
type notifierReport struct {
	mu  sync.Mutex
	got bool
	r   NotifierReport
}

// note keeps the report of the entry's egress() call.
func (n *notifierReport) note(p schema.Notifier) {
	r := NotifierReport{Asked: p.Asked(), Installed: p.Installed()}
	if why, err := p.Why(); err == nil {
		r.Why = strings.ToValidUTF8(why, "?")
		if len(r.Why) > maxWhy {
			r.Why = r.Why[:maxWhy]
		}
	}
	if !r.Asked {
		r.Installed = false
	}
	n.mu.Lock()
	n.got, n.r = true, r
	n.mu.Unlock()
}

// Notifier returns what toybox-entry reported of its connect() listener,
// and false before it has (or when the wall has no entry that asks).
// Only the entry's own connection reports: an app calling egress() on
// its fd 3 says nothing here.
func (v *Vat) Notifier() (NotifierReport, bool) {
	v.notifier.mu.Lock()
	defer v.notifier.mu.Unlock()
	return v.notifier.r, v.notifier.got
}
