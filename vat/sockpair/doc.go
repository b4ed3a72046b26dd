// Package sockpair makes the connected socket pairs toybox gives children.
//
// The far end of each pair is bound to an autobound abstract name before
// it leaves, so its holder cannot bind it to a name of its choosing.
package sockpair
