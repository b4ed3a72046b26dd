package supervisor

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// VatIDSpan is how many ids above Config.UIDBase the subordinate-id check
// covers: more vats than any host runs.
const VatIDSpan = 65536

// SubordinateClashes reads subuid and subgid (/etc/subuid, /etc/subgid)
// and names every host user whose subordinate ids include the vats' uids
// [uidBase, uidBase+VatIDSpan), their gids, or codeGID (when > 0): that
// user's rootless containers (newuidmap, newgidmap) can run processes with
// those ids, which then own a vat's data or read its code. A missing file
// clashes with nothing.
func SubordinateClashes(subuid, subgid string, uidBase, codeGID int) []string {
	var out []string
	check := func(path, what string, ranges [][2]int) {
		f, err := os.Open(path)
		if err != nil {
			return
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			parts := strings.Split(line, ":")
			if len(parts) != 3 {
				continue
			}
			start, err1 := strconv.Atoi(parts[1])
			count, err2 := strconv.Atoi(parts[2])
			if err1 != nil || err2 != nil || count <= 0 {
				continue
			}
			for _, r := range ranges {
				if start < r[1] && r[0] < start+count {
					out = append(out, fmt.Sprintf("%s: user %s's subordinate %s ids %d-%d include %s", path, parts[0], what, start, start+count-1, describeRange(r)))
				}
			}
		}
	}
	check(subuid, "user", [][2]int{{uidBase, uidBase + VatIDSpan}})
	gids := [][2]int{{uidBase, uidBase + VatIDSpan}}
	if codeGID > 0 {
		gids = append(gids, [2]int{codeGID, codeGID + 1})
	}
	check(subgid, "group", gids)
	return out
}

func describeRange(r [2]int) string {
	if r[1]-r[0] == 1 {
		return fmt.Sprintf("the code group %d", r[0])
	}
	return fmt.Sprintf("the vats' ids %d-%d", r[0], r[1]-1)
}
