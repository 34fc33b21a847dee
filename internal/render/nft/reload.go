package nft

import (
	"strings"
)

// Reload returns an nft script that turns a table holding the ruleset old was split from into
// ruleset (whose Layout is new) in one transaction without replacing the table, or false when
// either text is not one Render writes (then only the rendered replace will do).
//
// Replacing the table — what the rendered text does on its own: declare, delete, re-create —
// takes its base chains off their hooks and puts new ones on, and while that commits a
// connection's first packet can meet the old NAT chain and the new one on either side of the
// generation flip and be translated by neither; the new table's counters also start at zero.
// Reload keeps the table, its chains and its counters instead: every rule is flushed, every
// kept set and map flushed but the dynamic ones (drops_in_N, drops_out_N: their elements are
// the kernel's, made by the packets they count, and keep counting), the chains, sets, maps and counters the new ruleset does not
// declare — or declares differently: another hook, priority, policy, type or flags — deleted;
// then the new table is declared over it, which re-declares what stays (a no-op for a chain or
// counter that exists: its hook and its counts stay) and adds every rule and element. It is
// all one transaction: a packet meets the old ruleset or the new one, never a mix, and a
// refused script leaves the old one whole.
func Reload(old, new Layout, ruleset string) (string, bool) {
	oldDecl, ok := old.declarations()
	if !ok {
		return "", false
	}
	newDecl, ok := new.declarations()
	if !ok {
		return "", false
	}
	body, ok := strings.CutPrefix(withoutComments(ruleset), replacePreamble)
	if !ok {
		return "", false
	}
	var b strings.Builder
	b.Grow(len(body) + 64*len(oldDecl.order) + 40*len(old.Counters))
	b.WriteString("flush table " + Family + " " + Table + "\n")
	for _, key := range oldDecl.order {
		kind, name, _ := strings.Cut(key, " ")
		switch d, kept := newDecl.lines[key]; {
		case kept && d == oldDecl.lines[key] && dynamic(d):
			// What the kernel put into it stays: the elements' counters count on.
		case kept && d == oldDecl.lines[key] && kind != "chain":
			b.WriteString("flush " + kind + " " + Family + " " + Table + " " + name + "\n")
		case !kept || d != oldDecl.lines[key]:
			b.WriteString("delete " + kind + " " + Family + " " + Table + " " + name + "\n")
		}
	}
	keep := make(map[string]bool, len(new.Counters))
	for _, c := range new.Counters {
		keep[c] = true
	}
	for _, c := range old.Counters {
		if !keep[c] {
			b.WriteString("delete counter " + Family + " " + Table + " " + c + "\n")
		}
	}
	b.WriteString(body)
	return b.String(), true
}

// dynamic reports whether a set's declaration lines make it one the packet path adds to.
func dynamic(decl string) bool {
	for line := range strings.SplitSeq(decl, "\n") {
		if flags, ok := strings.CutPrefix(line, "flags "); ok {
			for f := range strings.SplitSeq(flags, ",") {
				if strings.TrimSpace(f) == "dynamic" {
					return true
				}
			}
		}
	}
	return false
}

// replacePreamble is how a rendered ruleset starts, after its comments: the table declared
// (so that there is one to delete), deleted, and declared anew below.
const replacePreamble = "table " + Family + " " + Table + " {}\ndelete table " + Family + " " + Table + "\n"

// withoutComments returns the text after the comment lines it starts with.
func withoutComments(text string) string {
	for strings.HasPrefix(text, "#") {
		_, text, _ = strings.Cut(text, "\n")
	}
	return text
}

// declarationsOf is the table's chains, sets and maps: lines maps "chain NAME", "set NAME" or
// "map NAME" to its declaration (a chain's hook line, if any; a set's type and flags lines),
// order has the keys in the order of the text.
type declarationsOf struct {
	order []string
	lines map[string]string
}

// declarations reads the chains', sets' and maps' declarations out of the Structure, which
// must be the rendered preamble followed by the one table and nothing else.
func (l Layout) declarations() (declarationsOf, bool) {
	d := declarationsOf{lines: map[string]string{}}
	rest, ok := strings.CutPrefix(l.Structure, replacePreamble+"table "+Family+" "+Table+" {\n")
	if !ok {
		return d, false
	}
	var key string // the object being read, "" between objects
	var decl []string
	for line := range strings.SplitSeq(rest, "\n") {
		switch {
		case key == "" && line == "}":
			key = "end" // the table's end: nothing may follow
		case key == "end":
			return d, false
		case key == "":
			kind, name, _ := strings.Cut(line, " ")
			if (kind != "chain" && kind != "set" && kind != "map") || !strings.HasSuffix(name, " {") {
				return d, false
			}
			key, decl = kind+" "+strings.TrimSuffix(name, " {"), nil
			if _, twice := d.lines[key]; twice {
				return d, false
			}
		case line == "}":
			d.order = append(d.order, key)
			d.lines[key] = strings.Join(decl, "\n")
			key = ""
		case strings.HasPrefix(key, "chain "):
			if strings.HasPrefix(line, "type ") {
				decl = append(decl, line)
			}
		default:
			decl = append(decl, line)
		}
	}
	return d, key == "end"
}
