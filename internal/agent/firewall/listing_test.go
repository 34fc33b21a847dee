package firewall

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// listed is a table as `nft -s list table` prints it (nft 1.0.6): named counters as empty
// objects, elements wrapped by width, a hash map's elements in the kernel's order.
const listed = `table ip bnerd_vpn {
	counter peer_a_in {
	}

	counter peer_b_in {
	}

	map peer_in {
		type ipv4_addr : counter
		flags interval
		elements = { 198.51.100.0/25 : "peer_a_in", 203.0.113.0/28 : "peer_b_in",
			     203.0.113.16/28 : "peer_b_in" }
	}

	map fwd_dnat {
		type ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service
		elements = { 100.64.7.12 . tcp . 22 : 192.0.2.30 . 22,
			     100.64.7.11 . tcp . 5432 : 192.0.2.20 . 5432,
			     100.64.7.10 . tcp . 443 : 192.0.2.10 . 443 }
	}

	set empty {
		type ipv4_addr
	}

	chain forward {
		type filter hook forward priority filter; policy drop;
		ct state established,related accept
		iifname "ipsec0" counter name ip saddr map @peer_in drop
		counter name "drop_other" drop
	}
}
`

// Normalised: counters one line each, sorted; sets, maps and chains sorted by name (sets and
// maps before chains, as nft lists them); elements one a line, sorted.
func TestNormalizeListing(t *testing.T) {
	got := normalizeListing(listed)
	want := []string{
		"table ip bnerd_vpn {",
		"\tcounter peer_a_in {}",
		"\tcounter peer_b_in {}",
		"\tset empty {",
		"\t\ttype ipv4_addr",
		"\t}",
		"\tmap fwd_dnat {",
		"\t\ttype ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service",
		"\t\telements = {",
		"\t\t\t100.64.7.10 . tcp . 443 : 192.0.2.10 . 443",
		"\t\t\t100.64.7.11 . tcp . 5432 : 192.0.2.20 . 5432",
		"\t\t\t100.64.7.12 . tcp . 22 : 192.0.2.30 . 22",
		"\t\t}",
		"\t}",
		"\tmap peer_in {",
		"\t\ttype ipv4_addr : counter",
		"\t\tflags interval",
		"\t\telements = {",
		"\t\t\t198.51.100.0/25 : \"peer_a_in\"",
		"\t\t\t203.0.113.0/28 : \"peer_b_in\"",
		"\t\t\t203.0.113.16/28 : \"peer_b_in\"",
		"\t\t}",
		"\t}",
		"\tchain forward {",
		"\t\ttype filter hook forward priority filter; policy drop;",
		"\t\tct state established,related accept",
		"\t\tiifname \"ipsec0\" counter name ip saddr map @peer_in drop",
		"\t\tcounter name \"drop_other\" drop",
		"\t}",
		"}",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("normalised:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// What is no state compares equal; anything that is state — a rule, its order, an element, a
// chain's policy, an object — differs, and the difference names where it is and what it is.
func TestListingDiff(t *testing.T) {
	applied := normalizeListing(listed)
	cases := []struct {
		name string
		edit func(string) string
		want string // "" equal; otherwise a substring of the difference
	}{
		{"identical", func(s string) string { return s }, ""},
		{"elements in another order and wrapped differently", func(s string) string {
			return strings.Replace(s, `elements = { 100.64.7.12 . tcp . 22 : 192.0.2.30 . 22,
			     100.64.7.11 . tcp . 5432 : 192.0.2.20 . 5432,
			     100.64.7.10 . tcp . 443 : 192.0.2.10 . 443 }`, `elements = { 100.64.7.10 . tcp . 443 : 192.0.2.10 . 443, 100.64.7.11 . tcp . 5432 : 192.0.2.20 . 5432, 100.64.7.12 . tcp . 22 : 192.0.2.30 . 22 }`, 1)
		}, ""},
		{"blank lines and trailing blanks", func(s string) string {
			return strings.ReplaceAll(strings.ReplaceAll(s, "\n\n", "\n"), "accept\n", "accept  \n\n")
		}, ""},
		{"a rule inserted at the top of a chain", func(s string) string {
			return strings.Replace(s, "policy drop;\n", "policy drop;\n\t\taccept\n", 1)
		}, `chain forward: "accept" found where "ct state established,related accept" was applied`},
		{"a rule appended", func(s string) string {
			return strings.Replace(s, "\"drop_other\" drop\n", "\"drop_other\" drop\n\t\tip saddr 203.0.113.5 accept\n", 1)
		}, `chain forward: "ip saddr 203.0.113.5 accept" found where "}" was applied`},
		{"a rule deleted", func(s string) string {
			return strings.Replace(s, "\t\tct state established,related accept\n", "", 1)
		}, `chain forward: "iifname`},
		{"the policy changed", func(s string) string { return strings.Replace(s, "policy drop", "policy accept", 1) },
			`chain forward: "type filter hook forward priority filter; policy accept;" found where`},
		{"an element added", func(s string) string {
			return strings.Replace(s, `203.0.113.16/28 : "peer_b_in" }`, `203.0.113.16/28 : "peer_b_in", 203.0.113.64/26 : "peer_a_in" }`, 1)
		}, `map peer_in: "203.0.113.64/26 : \"peer_a_in\"" found where "}" was applied`},
		{"an element removed", func(s string) string {
			return strings.Replace(s, "100.64.7.11 . tcp . 5432 : 192.0.2.20 . 5432,\n", "", 1)
		}, `map fwd_dnat: "100.64.7.12 . tcp . 22 : 192.0.2.30 . 22" found where "100.64.7.11`},
		{"an element changed", func(s string) string { return strings.Replace(s, "192.0.2.30 . 22", "192.0.2.31 . 22", 1) },
			`map fwd_dnat: "100.64.7.12 . tcp . 22 : 192.0.2.31 . 22" found where`},
		{"a chain added at the end", func(s string) string {
			return strings.TrimSuffix(s, "}\n") + "\tchain extra {\n\t}\n}\n"
		}, `"chain extra {" found where "chain forward {" was applied`},
		{"truncated", func(s string) string { return s[:strings.Index(s, "\tchain forward")] },
			`"chain forward {" missing`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := listingDiff(applied, normalizeListing(c.edit(listed)))
			switch {
			case c.want == "" && got != "":
				t.Errorf("differs: %s", got)
			case c.want != "" && !strings.Contains(got, c.want):
				t.Errorf("difference %q, want it to contain %q", got, c.want)
			}
		})
	}
	long := listingDiff([]string{"a"}, []string{strings.Repeat("x", 1000)})
	if len(long) > 300 {
		t.Errorf("an element-sized difference is not shortened: %d bytes", len(long))
	}
}

// Commas, braces and "elements = {" inside quoted strings are text, not structure.
func TestNormalizeListingQuotes(t *testing.T) {
	in := "table ip t {\n\tchain c {\n\t\tcomment \"elements = { x\"\n\t}\n\tmap m {\n\t\telements = { 1 : \"a,}b\", 0 : \"c\" }\n\t}\n}\n"
	got := strings.Join(normalizeListing(in), "\n")
	want := "table ip t {\n\tmap m {\n\t\telements = {\n\t\t\t0 : \"c\"\n\t\t\t1 : \"a,}b\"\n\t\t}\n\t}\n\tchain c {\n\t\tcomment \"elements = { x\"\n\t}\n}"
	if got != want {
		t.Errorf("normalised:\n%s\nwant:\n%s", got, want)
	}
}

// The kernel lists sets, maps and chains in the order they were created: a table loaded into
// (a set added after those kept) and one loaded afresh list them in different orders, but the
// same in normalised form. The rules' order within a chain is state: it stays, and differs.
func TestNormalizeListingBlockOrder(t *testing.T) {
	fresh := "table ip t {\n\tcounter a {\n\t}\n\tset s1 {\n\t\ttype ipv4_addr\n\t}\n\tmap m2 {\n\t\ttype ipv4_addr : counter\n\t}\n" +
		"\tchain forward {\n\t\ttype filter hook forward priority filter; policy drop;\n\t\tip saddr @s1 accept\n\t\tjump tun\n\t}\n\tchain tun {\n\t\taccept\n\t}\n}\n"
	reloaded := "table ip t {\n\tcounter a {\n\t}\n\tmap m2 {\n\t\ttype ipv4_addr : counter\n\t}\n\tset s1 {\n\t\ttype ipv4_addr\n\t}\n" +
		"\tchain tun {\n\t\taccept\n\t}\n\tchain forward {\n\t\ttype filter hook forward priority filter; policy drop;\n\t\tip saddr @s1 accept\n\t\tjump tun\n\t}\n}\n"
	if diff := listingDiff(normalizeListing(fresh), normalizeListing(reloaded)); diff != "" {
		t.Errorf("the same table in another creation order: %s", diff)
	}
	swapped := strings.Replace(reloaded, "\t\tip saddr @s1 accept\n\t\tjump tun\n", "\t\tjump tun\n\t\tip saddr @s1 accept\n", 1)
	if listingDiff(normalizeListing(fresh), normalizeListing(swapped)) == "" {
		t.Error("two rules swapped list the same")
	}
	want := []string{"table ip t {", "\tcounter a {}", "\tmap m2 {", "\t\ttype ipv4_addr : counter", "\t}", "\tset s1 {", "\t\ttype ipv4_addr", "\t}",
		"\tchain forward {", "\t\ttype filter hook forward priority filter; policy drop;", "\t\tip saddr @s1 accept", "\t\tjump tun", "\t}",
		"\tchain tun {", "\t\taccept", "\t}", "}"}
	if got := normalizeListing(fresh); !slices.Equal(got, want) {
		t.Errorf("normalised:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A 10,000-peer table lists some 40,000 elements over as many lines: normalising it is one
// pass (about 30 ms on this project's CI machine; nft's own listing takes 0.5 s).
func BenchmarkNormalizeListing(b *testing.B) {
	var s strings.Builder
	s.WriteString("table ip bnerd_vpn {\n\tset fwd_grants {\n\t\ttype ipv4_addr . ipv4_addr . inet_proto . inet_service\n\t\tflags interval\n\t\telements = { ")
	for i := range 40000 {
		if i > 0 {
			s.WriteString(",\n\t\t\t     ")
		}
		s.WriteString("100.96." + strconv.Itoa(i/64) + "." + strconv.Itoa(i%64*4) + "/30 . 100.64.7.10 . tcp . 5201")
	}
	s.WriteString(" }\n\t}\n}\n")
	listing := s.String()
	b.ResetTimer()
	for range b.N {
		if n := len(normalizeListing(listing)); n != 40000+8 {
			b.Fatalf("%d lines", n)
		}
	}
}
