//go:build !race

package front

// allocSlack is what the race detector adds to a count of allocations:
// none without it.
const allocSlack = 0
