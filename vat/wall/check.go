package wall

// Check is one line of `toybox doctor`.
type Check struct {
	Name   string // what was checked
	OK     bool
	Detail string // what was found
	Fix    string // how to fix it (empty when OK)
}
