package wall

// Check is one line of `toybox doctor`.
type Check struct {
	Name   string // what was checked
	OK     bool
	Warn   bool   // not OK, but walls still run (a limit this host cannot enforce)
	Detail string // what was found
	Fix    string // how to fix it (empty when OK)
	// Text is what the fix asks to write (an AppArmor profile), printed
	// whole below it; empty when there is none.
	Text string
}
