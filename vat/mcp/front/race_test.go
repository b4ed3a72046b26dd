//go:build race

package front

// allocSlack is what the race detector adds to a count of allocations:
// its sync.Pool drops some of what is put back, so json.Valid's scanner
// is sometimes new.
const allocSlack = 1
