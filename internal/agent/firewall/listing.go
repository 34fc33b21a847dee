package firewall

import (
	"fmt"
	"slices"
	"strings"

	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
)

// CanonicalListing is normalizeListing's form as one text: two listings of the same kernel
// state are equal in it, whatever order the kernel created their objects in (a table loaded
// whole and one grown by deltas list their counters in different orders).
func CanonicalListing(listing string) string {
	return strings.Join(normalizeListing(listing), "\n")
}

// normalizeListing returns a stateless table listing (`nft -s list table`) in a form two
// listings of the same kernel state always share: blank lines and trailing blanks dropped, and
// each `elements = { ... }` block written one element a line, sorted — the kernel lists a hash
// set in its own order and nft wraps element lines by width, neither of which is state. Rules
// keep their order (it is state). Counter values and other stateful data are not in a `-s`
// listing (nft 1.0.6 prints named counters as empty objects): each named counter is one line
// "\tcounter NAME {}", all of them sorted where the first one was — the kernel lists objects
// in the order they were created, which is no state either. A dynamic set's elements are left
// out: the kernel makes them as packets come (drops_in_N counts a subnet's drops from its
// first on), so they are not what the ruleset says.
func normalizeListing(listing string) []string {
	lines := strings.Split(listing, "\n")
	out := make([]string, 0, len(lines))
	dynamic := false // in a set the packet path adds to: its elements are no state of ours
	for i := 0; i < len(lines); i++ {
		line := strings.TrimRight(lines[i], " \t")
		if strings.TrimSpace(line) == "" {
			continue
		}
		switch trimmed := strings.TrimSpace(line); {
		case strings.HasSuffix(trimmed, " {") && (strings.HasPrefix(trimmed, "set ") || strings.HasPrefix(trimmed, "map ")):
			dynamic = false
		case strings.HasPrefix(trimmed, "flags ") && slices.Contains(strings.Split(strings.ReplaceAll(trimmed[len("flags "):], " ", ""), ","), "dynamic"):
			dynamic = true
		}
		if strings.HasPrefix(line, "\tcounter ") && strings.HasSuffix(line, " {") && i+1 < len(lines) &&
			strings.TrimRight(lines[i+1], " \t") == "\t}" {
			out = append(out, line+"}")
			i++
			continue
		}
		at := strings.Index(line, "elements = {")
		if at < 0 || inQuotes(line[:at]) {
			out = append(out, line)
			continue
		}
		// Gather the block up to its closing brace, across lines (scanned once: a large set
		// lists thousands of element lines).
		indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
		var sc blockScanner
		var inner strings.Builder
		part := line[at+len("elements = {"):]
		rest, closed := "", false
		for {
			var before string
			before, rest, closed = sc.scan(part)
			inner.WriteString(before)
			if closed || i+1 >= len(lines) {
				break
			}
			i++
			inner.WriteByte('\n')
			part = lines[i]
		}
		if dynamic {
			continue
		}
		out = append(out, line[:at]+"elements = {")
		elems := splitElements(inner.String())
		slices.Sort(elems)
		for _, e := range elems {
			out = append(out, indent+"\t"+e)
		}
		out = append(out, indent+"}"+strings.TrimRight(rest, " \t"))
	}
	return sortBlocks(sortCounters(out, nil, nil))
}

// sortBlocks returns the normalised lines with the table's sets and maps, and its chains,
// each group sorted by name: the kernel lists them in the order they were created, which a
// table loaded into (nft.Reload: a new set is created after the ones kept) does not share with
// one loaded afresh. The rules' order within a chain is state and stays.
func sortBlocks(lines []string) []string {
	type block struct {
		group int // 0 sets and maps, 1 chains
		name  string
		lines []string
	}
	var blocks []block
	var at []int // where each block started, in lines
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		group := -1
		switch {
		case !strings.HasSuffix(l, " {"):
		case strings.HasPrefix(l, "	set "), strings.HasPrefix(l, "	map "):
			group = 0
		case strings.HasPrefix(l, "	chain "):
			group = 1
		}
		if group < 0 {
			continue
		}
		end := i + 1
		for end < len(lines) && lines[end] != "	}" {
			end++
		}
		end = min(end+1, len(lines))
		_, name, _ := strings.Cut(strings.TrimSpace(l), " ")
		blocks = append(blocks, block{group, name, lines[i:end]})
		at = append(at, i)
		i = end - 1
	}
	byGroupAndName := func(a, b block) int {
		if a.group != b.group {
			return a.group - b.group
		}
		return strings.Compare(a.name, b.name)
	}
	if slices.IsSortedFunc(blocks, byGroupAndName) {
		return lines
	}
	order := slices.Clone(blocks)
	slices.SortStableFunc(order, byGroupAndName)
	out := make([]string, 0, len(lines))
	prev := 0
	for k, start := range at {
		out = append(out, lines[prev:start]...)
		out = append(out, order[k].lines...)
		prev = start + len(blocks[k].lines)
	}
	return append(out, lines[prev:]...)
}

// isCounterLine reports whether a normalised line declares a named counter.
func isCounterLine(l string) bool {
	return strings.HasPrefix(l, "\tcounter ") && strings.HasSuffix(l, " {}")
}

func counterLine(name string) string { return "\tcounter " + name + " {}" }

// sortCounters returns the normalised lines with the counters named in del left out, those in
// add added, and all counter lines sorted where the first one was (after the table's first
// line when there was none).
func sortCounters(lines []string, del, add []string) []string {
	at := -1
	var counters []string
	rest := make([]string, 0, len(lines)+len(add))
	drop := make(map[string]bool, len(del))
	for _, n := range del {
		drop[counterLine(n)] = true
	}
	for _, l := range lines {
		if !isCounterLine(l) {
			rest = append(rest, l)
			continue
		}
		if at < 0 {
			at = len(rest)
		}
		if !drop[l] {
			counters = append(counters, l)
		}
	}
	for _, n := range add {
		counters = append(counters, counterLine(n))
	}
	if len(counters) == 0 {
		return rest
	}
	if at < 0 {
		at = min(1, len(rest))
	}
	slices.Sort(counters)
	return slices.Concat(rest[:at], counters, rest[at:])
}

// applyToListing returns the normalised listing a table has after the delta d was applied to
// the table that listed as ref (normalised): what a whole load of the new ruleset lists.
// Elements are matched in the form nft lists them, which is the rendered one but for a /32,
// listed as the bare address.
func applyToListing(ref []string, d nft.Delta) []string {
	out := sortCounters(ref, d.DelCounters, d.AddCounters)
	for _, s := range d.Sets {
		kind := "set"
		if s.Set.Map {
			kind = "map"
		}
		open := slices.Index(out, "\t"+kind+" "+s.Set.Name+" {")
		if open < 0 {
			continue // not in the listing: the next check finds the difference
		}
		end := open + 1
		for end < len(out) && out[end] != "\t}" {
			end++
		}
		// The elements block, if any: from "\t\telements = {" to "\t\t}".
		from, to := end, end
		var elems []string
		if e := slices.Index(out[open:end], "\t\telements = {"); e >= 0 {
			from, to = open+e, open+e+1
			for to < end && out[to] != "\t\t}" {
				elems = append(elems, strings.TrimPrefix(out[to], "\t\t\t"))
				to++
			}
			to++ // past "\t\t}"
		}
		gone := make(map[string]bool, len(s.Del))
		for _, e := range s.Del {
			gone[listedElement(e)] = true
		}
		kept := slices.DeleteFunc(elems, func(e string) bool { return gone[e] })
		for _, e := range s.Add {
			kept = append(kept, listedElement(e))
		}
		slices.Sort(kept)
		var block []string
		if len(kept) > 0 {
			block = append(block, "\t\telements = {")
			for _, e := range kept {
				block = append(block, "\t\t\t"+e)
			}
			block = append(block, "\t\t}")
		}
		out = slices.Concat(out[:from], block, out[to:])
	}
	return out
}

// listedElement is an element as nft lists it: a /32 prefix is the bare address.
func listedElement(e string) string {
	fields := strings.Split(e, " ")
	for i, f := range fields {
		fields[i] = strings.TrimSuffix(f, "/32")
	}
	return strings.Join(fields, " ")
}

// inQuotes reports whether s ends inside a double-quoted string.
func inQuotes(s string) bool { return strings.Count(s, `"`)%2 == 1 }

// blockScanner finds the brace that closes an elements block, outside quotes and nested
// braces, one piece of the block at a time.
type blockScanner struct {
	depth  int
	quoted bool
}

// scan reads the next piece: what belongs to the block, what follows its closing brace, and
// whether the brace was in this piece.
func (b *blockScanner) scan(piece string) (inner, rest string, closed bool) {
	for i, c := range piece {
		switch {
		case c == '"':
			b.quoted = !b.quoted
		case b.quoted:
		case c == '{':
			b.depth++
		case c == '}':
			if b.depth == 0 {
				return piece[:i], piece[i+1:], true
			}
			b.depth--
		}
	}
	return piece, "", false
}

// splitElements splits the inside of an elements block at its top-level commas.
func splitElements(inner string) []string {
	var elems []string
	depth, quoted, start := 0, false, 0
	add := func(s string) {
		if s = strings.Join(strings.Fields(s), " "); s != "" {
			elems = append(elems, s)
		}
	}
	for i, c := range inner {
		switch {
		case c == '"':
			quoted = !quoted
		case quoted:
		case c == '{':
			depth++
		case c == '}':
			depth--
		case c == ',' && depth == 0:
			add(inner[start:i])
			start = i + 1
		}
	}
	add(inner[start:])
	return elems
}

// listingDiff describes the first difference between the listing applied (want) and the one
// found (got), both normalised: where (the table object it is in) and what, shortened for a
// log line and an Event. Empty when they are equal.
func listingDiff(want, got []string) string {
	n := min(len(want), len(got))
	i := 0
	for i < n && want[i] == got[i] {
		i++
	}
	if i == n && len(want) == len(got) {
		return ""
	}
	// Named after the set or chain it is in, unless both lines are the table's own (a set or
	// chain found where another was applied).
	nested := func(l []string) bool {
		return i < len(l) && (strings.HasPrefix(l[i], "\t\t") || l[i] == "\t}")
	}
	where := ""
	for j := i - 1; j >= 0 && (nested(want) || nested(got)); j-- {
		if l := want[j]; strings.HasPrefix(l, "\t") && !strings.HasPrefix(l, "\t\t") && strings.HasSuffix(l, "{") {
			where = strings.TrimSuffix(strings.TrimSpace(l), " {") + ": "
			break
		}
	}
	switch {
	case i == len(got):
		return fmt.Sprintf("%s%s missing", where, shorten(want[i]))
	case i == len(want):
		return fmt.Sprintf("%s%s added", where, shorten(got[i]))
	default:
		return fmt.Sprintf("%s%s found where %s was applied", where, shorten(got[i]), shorten(want[i]))
	}
}

// shorten quotes a listing line, cut to a length a log line and an Event message can carry.
func shorten(line string) string {
	line = strings.TrimSpace(line)
	const max = 120
	if len(line) > max {
		line = line[:max] + "…"
	}
	return fmt.Sprintf("%q", line)
}
