package nft

import (
	"fmt"
	"slices"
	"strings"
)

// Layout is a rendered ruleset taken apart into its structure — the table, its chains and
// rules, the declarations of its sets and maps — and its contents: the named counters and the
// sets' and maps' elements. Two rulesets with the same Structure differ only in contents, and
// the difference (Diff) can be applied to a loaded table element by element instead of
// re-loading it whole.
type Layout struct {
	// Structure is the ruleset without comments, counter declarations and element lists, one
	// statement a line: equal Structures mean equal tables but for their contents.
	Structure string
	// Counters are the names of the named counters, in the order of the text.
	Counters []string
	// Sets are the sets and maps, in the order of the text.
	Sets []SetContents
}

// SetContents is one set or map of a Layout.
type SetContents struct {
	Name string
	// Map is true for a map, false for a set.
	Map bool
	// Type is what follows "type " in the declaration (or the whole "typeof ..." line, the
	// key's expressions, which the element encoder knows only some of): the key's data types joined by " . ",
	// then, for a map, " : " and the value's ("ipv4_addr . inet_service : ipv4_addr").
	Type string
	// Interval: the declaration has "flags interval".
	Interval bool
	// Elements as the text writes them ("100.96.0.0 : 0x1234abcd"), blanks collapsed.
	Elements []string
}

// Delta is what turns the contents of one Layout into those of another of the same
// Structure.
type Delta struct {
	// AddCounters are created before any element is added (elements may refer to them);
	// DelCounters deleted after every element is deleted.
	AddCounters, DelCounters []string
	// Sets holds, in the order of the Layout, the sets and maps whose elements change.
	Sets []SetDelta
}

// SetDelta is the change of one set or map: Del is deleted, then Add added (an element whose
// map value changes is in both, under its old and its new value).
type SetDelta struct {
	Set      SetContents // its declaration; Elements is the new list
	Del, Add []string
}

// Empty reports whether the Delta changes nothing.
func (d Delta) Empty() bool {
	return len(d.AddCounters) == 0 && len(d.DelCounters) == 0 && len(d.Sets) == 0
}

// Changes is the number of counters and elements the Delta adds and deletes.
func (d Delta) Changes() int {
	n := len(d.AddCounters) + len(d.DelCounters)
	for _, s := range d.Sets {
		n += len(s.Del) + len(s.Add)
	}
	return n
}

// Split takes a ruleset as Render writes it apart into a Layout. It reads the text line by
// line: a line "counter NAME {...}" at the table's level declares a counter, "set NAME {" and
// "map NAME {" open a set, whose "type", "flags" and "elements = { ... }" lines it reads; a
// line starting with "#" is a comment. Anything it does not recognise is structure.
func Split(ruleset string) (Layout, error) {
	var l Layout
	var structure []string
	var set *SetContents
	ours := false // inside table Family Table: counters and sets elsewhere are structure
	// Every element is followed by a comma but a set's last: room for all of them in one
	// array, each set's Elements a part of it (the sets are read one after the other).
	all := make([]string, 0, strings.Count(ruleset, ",")+64)
	rest := ruleset
	next := func() (string, bool) {
		if rest == "" {
			return "", false
		}
		line, after, _ := strings.Cut(rest, "\n")
		rest = after
		return line, true
	}
	for raw, ok := next(); ok; raw, ok = next() {
		line := strings.TrimSpace(raw)
		if line == "" || line[0] == '#' {
			continue
		}
		if after, ok := strings.CutPrefix(line, "table "); ok && strings.HasSuffix(after, " {") {
			ours = after == Family+" "+Table+" {"
		}
		if set == nil && !ours {
			structure = append(structure, line)
			continue
		}
		if set == nil {
			if name, ok := declared(line, "counter "); ok && strings.HasPrefix(line[len("counter ")+len(name):], " {") && strings.HasSuffix(line, "}") {
				l.Counters = append(l.Counters, name)
				continue
			}
			for _, kind := range []string{"set ", "map "} {
				if name, ok := declared(line, kind); ok && line[len(kind)+len(name):] == " {" {
					l.Sets = append(l.Sets, SetContents{Name: name, Map: kind == "map "})
					set = &l.Sets[len(l.Sets)-1]
				}
			}
			structure = append(structure, line)
			continue
		}
		switch {
		case line == "}":
			set = nil
		case strings.HasPrefix(line, "type "):
			set.Type = strings.TrimPrefix(line, "type ")
		case strings.HasPrefix(line, "typeof "):
			// A key given by expressions (tunnel_sources: ipsec in reqid . ip saddr) is kept as
			// written: the element encoder reads the expressions it knows (others: a whole load).
			set.Type = line
		case strings.HasPrefix(line, "flags "):
			set.Interval = slices.Contains(strings.Split(strings.ReplaceAll(strings.TrimPrefix(line, "flags "), " ", ""), ","), "interval")
		case strings.HasPrefix(line, "elements = {"):
			// The block runs to the line ending in "}" (elements hold no braces; comment
			// lines inside it are notes). Elements are cut out of the text as they stand.
			part := strings.TrimPrefix(line, "elements = {")
			start := len(all)
			all = append(all, set.Elements...) // a second block goes on from the first
			for {
				if at := strings.IndexByte(part, '#'); at >= 0 {
					part = part[:at]
				}
				part = strings.TrimSpace(part)
				closed := strings.HasSuffix(part, "}")
				// The renderer writes single-spaced lines: checked once a line, not per element.
				clean := singleSpaced(part)
				for e := range strings.SplitSeq(strings.TrimSuffix(part, "}"), ",") {
					if e = strings.TrimSpace(e); e == "" {
						continue
					}
					if !clean && !singleSpaced(e) {
						e = strings.Join(strings.Fields(e), " ")
					}
					all = append(all, e)
					set.Elements = all[start:len(all):len(all)]
				}
				if closed {
					break
				}
				if part, ok = next(); !ok {
					return Layout{}, fmt.Errorf("set %s: elements block not closed", set.Name)
				}
			}
			continue // the elements are contents, not structure
		}
		structure = append(structure, line)
	}
	if set != nil {
		return Layout{}, fmt.Errorf("set %s not closed", set.Name)
	}
	l.Structure = strings.Join(structure, "\n")
	return l, nil
}

// singleSpaced reports whether s has no blank but single spaces (s holds no line break).
func singleSpaced(s string) bool {
	return !strings.Contains(s, "  ") && strings.IndexByte(s, '\t') < 0 && strings.IndexByte(s, '\r') < 0
}

// declared returns the name after kind ("counter ", "set ", "map ") at the start of line.
func declared(line, kind string) (string, bool) {
	rest, ok := strings.CutPrefix(line, kind)
	if !ok {
		return "", false
	}
	name, _, _ := strings.Cut(rest, " ")
	return name, name != "" && name != "{"
}

// Diff returns what turns the contents of old into those of new, or false when their
// structures differ (or a set is declared twice): then only a whole new ruleset will do.
func Diff(old, new Layout) (Delta, bool) {
	if old.Structure != new.Structure || len(old.Sets) != len(new.Sets) {
		return Delta{}, false
	}
	var d Delta
	d.DelCounters, d.AddCounters = changes(old.Counters, new.Counters)
	seen := make(map[string]bool, len(new.Sets))
	for i, n := range new.Sets {
		o := old.Sets[i]
		if o.Name != n.Name || o.Map != n.Map || o.Type != n.Type || o.Interval != n.Interval || seen[n.Name] {
			return Delta{}, false
		}
		seen[n.Name] = true
		if del, add := changes(o.Elements, n.Elements); len(del) > 0 || len(add) > 0 {
			d.Sets = append(d.Sets, SetDelta{Set: n, Del: del, Add: add})
		}
	}
	return d, true
}

// changes returns what of old is not in new and what of new is not in old. The lists are
// those of one set, without repeats, and the renderer writes them in a stable order, so they
// are walked side by side: an element added or deleted between common ones is found within a
// few elements ahead, and only where the two do not fall back in step is the rest compared
// as sets. Every element of old not met in step is deleted and every one of new not met in
// step added, so applying del then add always yields new (an element moved within the list
// is deleted and added again).
func changes(old, new []string) (del, add []string) {
	const window = 8 // how far ahead an element is looked for
	i, j := 0, 0
	for i < len(old) && j < len(new) {
		if old[i] == new[j] {
			i, j = i+1, j+1
			continue
		}
		if k := slices.Index(new[j:min(j+window, len(new))], old[i]); k > 0 {
			add, j = append(add, new[j:j+k]...), j+k
			continue
		}
		if k := slices.Index(old[i:min(i+window, len(old))], new[j]); k > 0 {
			del, i = append(del, old[i:i+k]...), i+k
			continue
		}
		break
	}
	o, n := old[i:], new[j:]
	trail := 0
	for trail < len(o) && trail < len(n) && o[len(o)-1-trail] == n[len(n)-1-trail] {
		trail++
	}
	o, n = o[:len(o)-trail], n[:len(n)-trail]
	return append(del, difference(o, n)...), append(add, difference(n, o)...)
}

// difference is what of a is not in b, in the order of a (duplicates in a once).
func difference(a, b []string) []string {
	in := make(map[string]bool, len(b))
	for _, s := range b {
		in[s] = true
	}
	var out []string
	for _, s := range a {
		if !in[s] {
			out = append(out, s)
			in[s] = true
		}
	}
	return out
}
