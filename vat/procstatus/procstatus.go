// Package procstatus reads the fields of a process's /proc status file.
//
// The file is lines of "Key:\tvalue" (proc(5)). Read returns them as a map,
// each value with the space around it trimmed.
package procstatus

import (
	"os"
	"strconv"
	"strings"
)

// Status is the fields of one /proc/<pid>/status file, by key.
type Status map[string]string

// Read reads /proc/<pid>/status. pid may be a process or a thread. Off
// Linux (no /proc) the error wraps os.ErrNotExist.
func Read(pid int) (Status, error) { return read(strconv.Itoa(pid)) }

// Self reads this process's status (/proc/self/status).
func Self() (Status, error) { return read("self") }

func read(name string) (Status, error) {
	b, err := os.ReadFile("/proc/" + name + "/status")
	if err != nil {
		return nil, err
	}
	return Parse(b), nil
}

// Parse reads the text of a status file. A line without a colon is
// skipped; a key seen twice keeps its first value.
func Parse(b []byte) Status {
	s := Status{}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if _, seen := s[k]; !seen {
			s[k] = strings.TrimSpace(v)
		}
	}
	return s
}

// Int returns field key as a decimal number, and whether it is one.
func (s Status) Int(key string) (int, bool) {
	n, err := strconv.Atoi(s[key])
	return n, err == nil
}

// Fields returns field key split at white space (Uid, Gid: real,
// effective, saved, file system).
func (s Status) Fields(key string) []string { return strings.Fields(s[key]) }
