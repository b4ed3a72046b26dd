package bridge

import (
	"errors"
	"io"
	"sync"
)

// A request body is read whole and held, with the copies its forwarding
// makes, until its call is answered. Unbounded, one client's concurrent
// large POSTs (each up to MaxMessage) would take more memory than the
// wall has, and end the vat for every client.
const (
	// freeBody is how much of each body is not counted: most messages
	// are a few hundred bytes, and the supervisor bounds how many
	// requests are in flight.
	freeBody = 64 << 10
	// bodiesPerPrincipal and bodiesAll bound what is counted, in
	// messages of MaxMessage: one principal's, and every principal's
	// together.
	bodiesPerPrincipal = 1
	bodiesAll          = 3
)

// errBudget ends a body read past the budget.
var errBudget = errors.New("the vat holds as many request bodies as it may")

// budget counts the request body bytes held, per principal and in all.
type budget struct {
	mu   sync.Mutex
	held int64
	by   map[string]int64
}

// take counts n more bytes of principal's if that stays within per and
// all, and reports whether it did.
func (bu *budget) take(principal string, n, per, all int64) bool {
	bu.mu.Lock()
	defer bu.mu.Unlock()
	if bu.by[principal]+n > per || bu.held+n > all {
		return false
	}
	if bu.by == nil {
		bu.by = map[string]int64{}
	}
	bu.by[principal] += n
	bu.held += n
	return true
}

// give stops counting n bytes of principal's.
func (bu *budget) give(principal string, n int64) {
	bu.mu.Lock()
	defer bu.mu.Unlock()
	bu.by[principal] -= n
	if bu.by[principal] <= 0 {
		delete(bu.by, principal)
	}
	bu.held -= n
}

// budgetReader reads one body, counting what it read past freeBody
// against the budget; a read past the budget fails with errBudget.
type budgetReader struct {
	r         io.Reader
	bu        *budget
	principal string
	per, all  int64
	read      int64 // bytes read
	taken     int64 // bytes counted
}

func (br *budgetReader) Read(p []byte) (int, error) {
	n, err := br.r.Read(p)
	br.read += int64(n)
	if need := br.read - freeBody - br.taken; need > 0 {
		if !br.bu.take(br.principal, need, br.per, br.all) {
			return 0, errBudget
		}
		br.taken += need
	}
	return n, err
}

// release stops counting the body (it is no longer held).
func (br *budgetReader) release() {
	if br.taken > 0 {
		br.bu.give(br.principal, br.taken)
		br.taken = 0
	}
}
