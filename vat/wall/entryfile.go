package wall

import "os"

// Entry is toybox-entry, opened once by OpenEntry. A wall given it in
// Spec.Entry runs this very file, whatever its path names by then: a
// binary renamed over it (an upgrade not yet followed by a restart)
// never pairs with the supervisor that opened the old one.
type Entry struct {
	f    *os.File // O_PATH, close-on-exec; kept for the holder's life
	path string   // the real path it was opened at, for messages
	id   fileID   // its identity, for the plan
}

// Path is the real path the entry was opened at. The file there now may
// be another one.
func (e *Entry) Path() string { return e.path }
