package switchboard

// cleanup is a stack of releases for a function that builds something in
// steps: each step that takes a resource adds its release, an early return
// runs them in reverse, and success disarms them (STYLE.md §5).
type cleanup struct{ fns []func() }

// add registers f to run on cleanup.
func (c *cleanup) add(f func()) { c.fns = append(c.fns, f) }

// run runs every registered release, last first, and forgets them.
func (c *cleanup) run() {
	for i := len(c.fns) - 1; i >= 0; i-- {
		c.fns[i]()
	}
	c.fns = nil
}

// release forgets every registered release without running it: what they
// would release now belongs to someone else.
func (c *cleanup) release() { c.fns = nil }
