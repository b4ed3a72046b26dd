package packages

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a semantic version (semver.org 2.0.0), build metadata dropped.
type Version struct {
	Major, Minor, Patch int
	Pre                 []string // prerelease identifiers; nil for a release
}

// ParseVersion reads one exact version: "1.2.3", "1.2.3-rc.1",
// "1.2.3+build", optionally with a leading "v" or "=". A range, a partial
// version ("1.2") or a tag is an error.
func ParseVersion(s string) (Version, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(s), "="), "v")
	if i := strings.IndexByte(t, '+'); i >= 0 {
		if !idents(t[i+1:], false) {
			return Version{}, fmt.Errorf("version %q: bad build metadata", s)
		}
		t = t[:i]
	}
	core, pre, hasPre := strings.Cut(t, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("version %q is not MAJOR.MINOR.PATCH", s)
	}
	var n [3]int
	for i, p := range parts {
		v, ok := number(p)
		if !ok {
			return Version{}, fmt.Errorf("version %q: %q is not a number", s, p)
		}
		n[i] = v
	}
	v := Version{Major: n[0], Minor: n[1], Patch: n[2]}
	if hasPre {
		if !idents(pre, true) {
			return Version{}, fmt.Errorf("version %q: bad prerelease", s)
		}
		v.Pre = strings.Split(pre, ".")
	}
	return v, nil
}

// number reads a non-negative decimal without leading zeros.
func number(p string) (int, bool) {
	if p == "" || len(p) > 9 || (len(p) > 1 && p[0] == '0') {
		return 0, false
	}
	v, err := strconv.Atoi(p)
	return v, err == nil && v >= 0
}

// idents reports whether s is dot-separated [0-9A-Za-z-] identifiers
// (numeric ones without leading zeros, when numeric is set).
func idents(s string, numeric bool) bool {
	if s == "" {
		return false
	}
	for _, id := range strings.Split(s, ".") {
		if id == "" {
			return false
		}
		digits := true
		for _, r := range id {
			switch {
			case r >= '0' && r <= '9':
			case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '-':
				digits = false
			default:
				return false
			}
		}
		if numeric && digits && len(id) > 1 && id[0] == '0' {
			return false
		}
	}
	return true
}

// String writes v as MAJOR.MINOR.PATCH[-pre].
func (v Version) String() string {
	s := fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
	if len(v.Pre) > 0 {
		s += "-" + strings.Join(v.Pre, ".")
	}
	return s
}

// Compare returns -1, 0 or 1 as v is below, equal to or above w, by
// semver precedence.
func (v Version) Compare(w Version) int {
	for _, d := range [3]int{v.Major - w.Major, v.Minor - w.Minor, v.Patch - w.Patch} {
		if d != 0 {
			return sign(d)
		}
	}
	switch {
	case len(v.Pre) == 0 && len(w.Pre) == 0:
		return 0
	case len(v.Pre) == 0:
		return 1
	case len(w.Pre) == 0:
		return -1
	}
	for i := 0; i < len(v.Pre) && i < len(w.Pre); i++ {
		a, b := v.Pre[i], w.Pre[i]
		an, aok := number(a)
		bn, bok := number(b)
		switch {
		case aok && bok:
			if an != bn {
				return sign(an - bn)
			}
		case aok:
			return -1
		case bok:
			return 1
		case a != b:
			return sign(strings.Compare(a, b))
		}
	}
	return sign(len(v.Pre) - len(w.Pre))
}

func sign(d int) int {
	switch {
	case d < 0:
		return -1
	case d > 0:
		return 1
	}
	return 0
}

// Range is an npm version range: comparator sets joined by "||".
type Range struct {
	sets [][]comparator
}

type comparator struct {
	op string // "<", "<=", ">", ">=", "="
	v  Version
}

// ParseRange reads an npm range: "^1.2.3", "~1.2", ">=18", "1.x",
// "1.2.3 - 2", "*", "" and their unions with "||". A prerelease version
// satisfies only a comparator set that names a prerelease of the same
// MAJOR.MINOR.PATCH, as npm's rule says.
func ParseRange(s string) (Range, error) {
	var r Range
	for _, alt := range strings.Split(s, "||") {
		set, err := parseSet(strings.TrimSpace(alt))
		if err != nil {
			return Range{}, fmt.Errorf("range %q: %w", s, err)
		}
		r.sets = append(r.sets, set)
	}
	return r, nil
}

// Satisfies reports whether v is in r.
func (r Range) Satisfies(v Version) bool {
	for _, set := range r.sets {
		if setHas(set, v) {
			return true
		}
	}
	return false
}

func setHas(set []comparator, v Version) bool {
	for _, c := range set {
		d := v.Compare(c.v)
		ok := false
		switch c.op {
		case "<":
			ok = d < 0
		case "<=":
			ok = d <= 0
		case ">":
			ok = d > 0
		case ">=":
			ok = d >= 0
		case "=":
			ok = d == 0
		}
		if !ok {
			return false
		}
	}
	if len(v.Pre) == 0 {
		return true
	}
	for _, c := range set {
		if len(c.v.Pre) > 0 && c.v.Major == v.Major && c.v.Minor == v.Minor && c.v.Patch == v.Patch {
			return true
		}
	}
	return false
}

// partial is a version with its missing or wild parts (-1).
type partial struct {
	n   [3]int
	pre []string
}

func parsePartial(s string) (partial, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(s, "="), "v")
	if i := strings.IndexByte(t, '+'); i >= 0 {
		t = t[:i]
	}
	core, pre, hasPre := strings.Cut(t, "-")
	p := partial{n: [3]int{-1, -1, -1}}
	parts := strings.Split(core, ".")
	if len(parts) > 3 || core == "" {
		return p, fmt.Errorf("%q is not a version", s)
	}
	for i, x := range parts {
		if x == "x" || x == "X" || x == "*" {
			break
		}
		v, ok := number(x)
		if !ok {
			return p, fmt.Errorf("%q is not a version", s)
		}
		p.n[i] = v
	}
	if hasPre {
		if p.n[2] < 0 || !idents(pre, true) {
			return p, fmt.Errorf("%q: a prerelease needs a full version", s)
		}
		p.pre = strings.Split(pre, ".")
	}
	return p, nil
}

func (p partial) floor() Version {
	return Version{Major: max(p.n[0], 0), Minor: max(p.n[1], 0), Patch: max(p.n[2], 0), Pre: p.pre}
}

// known is how many leading parts p names.
func (p partial) known() int {
	for i, x := range p.n {
		if x < 0 {
			return i
		}
	}
	return 3
}

// bump is the lowest version above every version matching p's first k
// parts (as a "<" bound, prerelease 0 so no prerelease of it slips in).
func bump(p partial, k int) Version {
	v := Version{Pre: []string{"0"}}
	switch k {
	case 1:
		v.Major = p.n[0] + 1
	case 2:
		v.Major, v.Minor = p.n[0], p.n[1]+1
	default:
		v.Major, v.Minor, v.Patch = p.n[0], p.n[1], p.n[2]+1
	}
	return v
}

func parseSet(s string) ([]comparator, error) {
	if s == "" || s == "*" || s == "x" || s == "X" {
		return []comparator{{">=", Version{}}}, nil
	}
	f := strings.Fields(s)
	if len(f) == 3 && f[1] == "-" {
		lo, err := parsePartial(f[0])
		if err != nil {
			return nil, err
		}
		hi, err := parsePartial(f[2])
		if err != nil {
			return nil, err
		}
		set := []comparator{{">=", lo.floor()}}
		if k := hi.known(); k == 3 {
			set = append(set, comparator{"<=", hi.floor()})
		} else if k > 0 {
			set = append(set, comparator{"<", bump(hi, k)})
		}
		return set, nil
	}
	// Operators may be written apart from their version (">= 1.2").
	var toks []string
	for i := 0; i < len(f); i++ {
		if strings.Trim(f[i], "<>=~^") == "" && i+1 < len(f) {
			toks = append(toks, f[i]+f[i+1])
			i++
			continue
		}
		toks = append(toks, f[i])
	}
	var set []comparator
	for _, t := range toks {
		cs, err := parseComparator(t)
		if err != nil {
			return nil, err
		}
		set = append(set, cs...)
	}
	return set, nil
}

func parseComparator(t string) ([]comparator, error) {
	op := ""
	for _, o := range []string{">=", "<=", ">", "<", "=", "~>", "~", "^"} {
		if strings.HasPrefix(t, o) {
			op, t = o, t[len(o):]
			break
		}
	}
	if t == "" {
		return nil, fmt.Errorf("an operator %q with no version", op)
	}
	p, err := parsePartial(t)
	if err != nil {
		return nil, err
	}
	k := p.known()
	lo := p.floor()
	switch op {
	case "", "=":
		switch k {
		case 0:
			return []comparator{{">=", Version{}}}, nil
		case 3:
			return []comparator{{"=", lo}}, nil
		}
		return []comparator{{">=", lo}, {"<", bump(p, k)}}, nil
	case "~", "~>":
		if k == 0 {
			return []comparator{{">=", Version{}}}, nil
		}
		return []comparator{{">=", lo}, {"<", bump(p, min(k, 2))}}, nil
	case "^":
		if k == 0 {
			return []comparator{{">=", Version{}}}, nil
		}
		// The first part that is not zero (or the last named) may not move.
		fix := 1
		switch {
		case p.n[0] > 0 || k == 1:
			fix = 1
		case p.n[1] > 0 || k == 2:
			fix = 2
		default:
			fix = 3
		}
		return []comparator{{">=", lo}, {"<", bump(p, fix)}}, nil
	case ">":
		if k < 3 {
			if k == 0 {
				return []comparator{{"<", Version{}}}, nil // nothing
			}
			return []comparator{{">=", bump(p, k)}}, nil
		}
		return []comparator{{">", lo}}, nil
	case ">=":
		return []comparator{{">=", lo}}, nil
	case "<":
		if k == 0 {
			return []comparator{{"<", Version{}}}, nil
		}
		if k < 3 {
			lo.Pre = []string{"0"}
		}
		return []comparator{{"<", lo}}, nil
	case "<=":
		if k < 3 {
			if k == 0 {
				return []comparator{{">=", Version{}}}, nil
			}
			return []comparator{{"<", bump(p, k)}}, nil
		}
		return []comparator{{"<=", lo}}, nil
	}
	return nil, fmt.Errorf("operator %q", op)
}
