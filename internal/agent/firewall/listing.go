package firewall

import (
	"fmt"
	"slices"
	"strings"
)

// normalizeListing returns a stateless table listing (`nft -s list table`) in a form two
// listings of the same kernel state always share: blank lines and trailing blanks dropped, and
// each `elements = { ... }` block written one element a line, sorted — the kernel lists a hash
// set in its own order and nft wraps element lines by width, neither of which is state. Rules
// keep their order (it is state). Counter values and other stateful data are not in a `-s`
// listing (nft 1.0.6 prints named counters as empty objects).
func normalizeListing(listing string) []string {
	lines := strings.Split(listing, "\n")
	out := make([]string, 0, len(lines))
	for i := 0; i < len(lines); i++ {
		line := strings.TrimRight(lines[i], " \t")
		if strings.TrimSpace(line) == "" {
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
		out = append(out, line[:at]+"elements = {")
		elems := splitElements(inner.String())
		slices.Sort(elems)
		for _, e := range elems {
			out = append(out, indent+"\t"+e)
		}
		out = append(out, indent+"}"+strings.TrimRight(rest, " \t"))
	}
	return out
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
	where := ""
	for j := i - 1; j >= 0; j-- {
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
