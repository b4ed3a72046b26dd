package owner

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"toybox/labels"
)

// StateVats returns an InstalledVats function for the supervisor's state
// layout: the installed vats are the records <state>/vats/<id>.json (see
// vat/store). The directory is 0700 and owned by the toybox user, so the
// checker's process must be able to read it.
func StateVats(stateDir string, log *slog.Logger) func() []string {
	return DirVats(filepath.Join(stateDir, "vats"), log)
}

// DirVats returns an InstalledVats function that lists dir on every call: each
// regular file <id>.json and each directory <id>, where id is a valid vat id,
// names an installed vat. An install or a removal is seen by the next
// uncached decision. A dir that cannot be read yields no vats (every
// container refused, never passed) and a warning on log (nil = discard).
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
			name := e.Name()
			switch {
			case e.IsDir() && labels.ValidVatID(name):
				ids = append(ids, name)
			case e.Type().IsRegular() && strings.HasSuffix(name, ".json") && labels.ValidVatID(strings.TrimSuffix(name, ".json")):
				ids = append(ids, strings.TrimSuffix(name, ".json"))
			}
		}
		return ids
	}
}
