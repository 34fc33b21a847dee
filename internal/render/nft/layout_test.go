package nft

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Split takes every rendered fixture apart so that the structure holds none of its contents
// and putting the contents back gives the same elements Render wrote; and the delta between
// two renders of the same shape is the difference of their contents, nothing else.
func TestSplitRenderedFixtures(t *testing.T) {
	for _, c := range renderCases() {
		t.Run(c.name, func(t *testing.T) {
			g := c.gw()
			text, err := Render(g, c.opts(g))
			if err != nil {
				t.Fatal(err)
			}
			l, err := Split(text)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(l.Structure, "#") || strings.Contains(l.Structure, "elements") {
				t.Errorf("comments or elements in the structure:\n%s", l.Structure)
			}
			for _, name := range l.Counters {
				if strings.Contains(l.Structure, "counter "+name+" {") {
					t.Errorf("counter %s declared in the structure", name)
				}
				if !strings.Contains(text, "counter "+name+" {") {
					t.Errorf("counter %s is not declared in the text", name)
				}
			}
			p, err := newPlan(g, c.opts(g))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, s := range l.Sets {
				if s.Type == "" || !strings.Contains(l.Structure, map[bool]string{true: "map ", false: "set "}[s.Map]+s.Name+" {") {
					t.Errorf("set %+v: no type, or not declared in the structure", s)
				}
				for _, e := range s.Elements {
					if !strings.Contains(text, e) {
						t.Errorf("set %s: element %q is not in the text", s.Name, e)
					}
				}
				n += len(s.Elements)
			}
			want := p.elements()
			if p.serviceKeyed() { // rev_svc_dnat, rev_svc_snat and their key sets, which elements() leaves out
				for _, r := range p.reverse {
					if r.serviceIP.IsValid() {
						want += 4
					}
				}
			}
			if n != want {
				t.Errorf("%d elements split out, the plan has %d", n, want)
			}
			if d, ok := Diff(l, l); !ok || !d.Empty() {
				t.Errorf("a layout differs from itself: %+v %v", d, ok)
			}
		})
	}
}

func TestDiff(t *testing.T) {
	text := func(counters, peerIn, dnat string) string {
		return "table ip bnerd_vpn {}\ndelete table ip bnerd_vpn\ntable ip bnerd_vpn {\n" + counters +
			"\t# a comment\n\tmap peer_in {\n\t\ttype ipv4_addr : counter\n\t\tflags interval\n" + peerIn + "\t}\n" +
			"\tmap fwd_dnat {\n\t\ttype ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service\n" + dnat + "\t}\n" +
			"\tchain forward {\n\t\ttype filter hook forward priority filter; policy drop;\n\t\tcounter name ip saddr map @peer_in drop\n\t\tcounter name \"drop_other\" drop\n\t}\n}\n"
	}
	old := text("\tcounter peer_a_in {}\n\tcounter peer_b_in { packets 3 bytes 252 }\n\tcounter drop_other {}\n",
		"\t\telements = {\n\t\t\t# peers\n\t\t\t10.0.0.0/24 : \"peer_a_in\",\n\t\t\t10.0.1.0/24 : \"peer_b_in\"\n\t\t}\n",
		"\t\telements = { 100.64.7.10 . tcp . 443 : 192.0.2.10 . 443 }\n")
	cases := []struct {
		name string
		new  string
		want string // "structure" when Diff refuses
	}{
		{"the same", old, ""},
		{"comments, wrapping and counter values are no change",
			strings.ReplaceAll(strings.ReplaceAll(old, "# a comment", "# another"), "packets 3 bytes 252", "packets 9 bytes 900"), ""},
		{"a peer replaced",
			text("\tcounter peer_a_in {}\n\tcounter peer_c_in {}\n\tcounter drop_other {}\n",
				"\t\telements = {\n\t\t\t10.0.0.0/24 : \"peer_a_in\", 10.0.2.0/24 : \"peer_c_in\"\n\t\t}\n",
				"\t\telements = { 100.64.7.10 . tcp . 443 : 192.0.2.10 . 443 }\n"),
			`+[peer_c_in] -[peer_b_in] peer_in -[10.0.1.0/24 : "peer_b_in"] +[10.0.2.0/24 : "peer_c_in"]`},
		{"a map value changed, a set emptied",
			text("\tcounter peer_a_in {}\n\tcounter peer_b_in {}\n\tcounter drop_other {}\n", "",
				"\t\telements = { 100.64.7.10 . tcp . 443 : 192.0.2.11 . 443 }\n"),
			`+[] -[] peer_in -[10.0.0.0/24 : "peer_a_in" 10.0.1.0/24 : "peer_b_in"] +[] fwd_dnat -[100.64.7.10 . tcp . 443 : 192.0.2.10 . 443] +[100.64.7.10 . tcp . 443 : 192.0.2.11 . 443]`},
		{"a rule changed", strings.Replace(old, "policy drop", "policy accept", 1), "structure"},
		{"a set's type changed", strings.Replace(old, "type ipv4_addr : counter", "type ipv4_addr : mark", 1), "structure"},
		{"a set's flags changed", strings.Replace(old, "\t\tflags interval\n", "", 1), "structure"},
		{"a set added", strings.Replace(old, "\tchain forward", "\tset more {\n\t\ttype ipv4_addr\n\t}\n\tchain forward", 1), "structure"},
	}
	from, err := Split(old)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"peer_a_in", "peer_b_in", "drop_other"}; !reflect.DeepEqual(from.Counters, want) {
		t.Fatalf("counters %v, want %v", from.Counters, want)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			to, err := Split(c.new)
			if err != nil {
				t.Fatal(err)
			}
			d, ok := Diff(from, to)
			got := "structure"
			if ok {
				got = ""
				if !d.Empty() {
					got = fmt.Sprintf("+%v -%v", d.AddCounters, d.DelCounters)
					for _, s := range d.Sets {
						got += fmt.Sprintf(" %s -%v +%v", s.Set.Name, s.Del, s.Add)
					}
				}
			}
			if got != c.want {
				t.Errorf("delta\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

// A counter or set of another table, and a set or elements block left open, are not taken
// for the gateway's contents.
func TestSplitEdges(t *testing.T) {
	other := "table ip other {\n\tcounter c {}\n\tset s {\n\t\ttype ipv4_addr\n\t\telements = { 10.0.0.1 }\n\t}\n}\n"
	l, err := Split(other)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Counters) != 0 || len(l.Sets) != 0 || !strings.Contains(l.Structure, "10.0.0.1") {
		t.Errorf("another table's contents split out: %+v", l)
	}
	// Two blocks of one set are one list; each set's list is its own.
	l, err = Split("table ip bnerd_vpn {\n\tset s {\n\t\ttype ipv4_addr\n\t\telements = { 10.0.0.1,\n\t\t\t10.0.0.2 }\n" +
		"\t\telements = { 10.0.0.3 }\n\t}\n\tset t {\n\t\ttype ipv4_addr\n\t\telements = { 10.0.0.9 }\n\t}\n}\n")
	if err != nil {
		t.Fatal(err)
	}
	_ = append(l.Sets[0].Elements, "10.0.0.4")
	if got := fmt.Sprint(l.Sets[0].Elements, l.Sets[1].Elements); got != "[10.0.0.1 10.0.0.2 10.0.0.3] [10.0.0.9]" {
		t.Errorf("elements %s", got)
	}
	for _, broken := range []string{
		"table ip bnerd_vpn {\n\tset s {\n\t\ttype ipv4_addr\n",
		"table ip bnerd_vpn {\n\tset s {\n\t\ttype ipv4_addr\n\t\telements = { 10.0.0.1,\n",
	} {
		if _, err := Split(broken); err == nil {
			t.Errorf("no error for %q", broken)
		}
	}
}

// BenchmarkSplit splits the 10,000-peer ruleset of BenchmarkRuleset, as the agent does with
// every ruleset it applies.
func BenchmarkSplit(b *testing.B) {
	g := benchGateway(10000)
	text, err := Render(g, libipsec(g))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := Split(text); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDiff is the delta of one peer added to the 10,000-peer ruleset.
func BenchmarkDiff(b *testing.B) {
	layout := func(n int) Layout {
		g := benchGateway(n)
		text, err := Render(g, libipsec(g))
		if err != nil {
			b.Fatal(err)
		}
		l, err := Split(text)
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	old, next := layout(10000), layout(10001)
	b.ResetTimer()
	for range b.N {
		if d, ok := Diff(old, next); !ok || d.Changes() != 7 { // 2 counters, 1 element in each peer map, 3 grants
			b.Fatalf("%+v %v", d, ok)
		}
	}
}

// TestChangesApplied: whatever the two lists (elements added, deleted, moved, a map value
// changed), deleting del from old and then adding add yields exactly new, and no element is
// deleted that new keeps in step or added that old already had in step.
func TestChangesApplied(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 2000 {
		var old []string
		for i := range rng.IntN(40) {
			old = append(old, fmt.Sprintf("e%d", i))
		}
		next := slices.Clone(old)
		for range rng.IntN(4) {
			switch op := rng.IntN(4); {
			case op == 0 && len(next) > 0: // delete
				k := rng.IntN(len(next))
				next = slices.Delete(next, k, k+1)
			case op == 1: // add
				next = slices.Insert(next, rng.IntN(len(next)+1), fmt.Sprintf("n%d-%d", round, rng.IntN(1000)))
			case op == 2 && len(next) > 1: // move
				k := rng.IntN(len(next))
				e := next[k]
				next = slices.Delete(next, k, k+1)
				next = slices.Insert(next, rng.IntN(len(next)+1), e)
			case op == 3 && len(next) > 0: // a map value changes
				next[rng.IntN(len(next))] += "'"
			}
		}
		next = slices.Compact(next) // the renderer writes no repeats
		if len(slices.Compact(slices.Sorted(slices.Values(next)))) != len(next) {
			continue
		}
		del, add := changes(old, next)
		have := map[string]bool{}
		for _, e := range old {
			have[e] = true
		}
		for _, e := range del {
			if !have[e] {
				t.Fatalf("old %v new %v: deletes %s, which old has not", old, next, e)
			}
			delete(have, e)
		}
		for _, e := range add {
			if have[e] {
				t.Fatalf("old %v new %v: adds %s, which is there", old, next, e)
			}
			have[e] = true
		}
		want := map[string]bool{}
		for _, e := range next {
			want[e] = true
		}
		if !maps.Equal(have, want) {
			t.Fatalf("old %v new %v: del %v add %v leaves %v", old, next, del, add, slices.Sorted(maps.Keys(have)))
		}
	}
}
