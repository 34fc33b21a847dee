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
		// Gather the block up to its closing brace, across lines.
		indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
		body := line[at+len("elements = {"):]
		inner, rest, closed := closeBlock(body)
		for !closed && i+1 < len(lines) {
			i++
			body += "\n" + lines[i]
			inner, rest, closed = closeBlock(body)
		}
		out = append(out, line[:at]+"elements = {")
		elems := splitElements(inner)
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

// closeBlock finds the brace that closes an elements block in body (what follows
// "elements = {"), outside quotes and nested braces: the elements before it, what follows it,
// and whether it was found.
func closeBlock(body string) (inner, rest string, closed bool) {
	depth, quoted := 0, false
	for i, c := range body {
		switch {
		case c == '"':
			quoted = !quoted
		case quoted:
		case c == '{':
			depth++
		case c == '}':
			if depth == 0 {
				return body[:i], body[i+1:], true
			}
			depth--
		}
	}
	return body, "", false
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
