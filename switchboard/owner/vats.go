package owner

import (
	"log/slog"
	"os"
	"regexp"
)

// vatID is the syntax of a vat id (labels: [a-z0-9][a-z0-9-]{0,62}).
var vatID = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// DirVats returns an InstalledVats function that lists the installed vats as
// the names of the subdirectories of dir that are valid vat ids — for the
// supervisor's state layout, dir is <state>/data (one folder per installed
// vat, kept across upgrades). It reads dir on every call, so an install or a
// removal is seen by the next uncached decision. A dir that cannot be read
// yields no vats (every container refused, never passed) and one warning on
// log (nil = discard).
func DirVats(dir string, log *slog.Logger) func() []string {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func() []string {
		ents, err := os.ReadDir(dir)
		if err != nil {
			log.Warn("listing installed vats", slog.String("dir", dir), slog.String("error", err.Error()))
			return nil
		}
		var ids []string
		for _, e := range ents {
			if e.IsDir() && vatID.MatchString(e.Name()) {
				ids = append(ids, e.Name())
			}
		}
		return ids
	}
}
