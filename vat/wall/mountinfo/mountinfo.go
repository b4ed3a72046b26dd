// Package mountinfo reads fields of the kernel's mount table
// (/proc/<pid>/mountinfo).
package mountinfo

import (
	"strconv"
	"strings"
)

// Unescape undoes the kernel's octal escapes in a mountinfo field (\040
// for a space, \011, \012, \134).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
