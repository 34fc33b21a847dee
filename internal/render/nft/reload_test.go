package nft

import (
	"strings"
	"testing"
)

// The script Reload writes: rules flushed, kept sets and maps flushed (a dynamic one kept
// whole: the kernel's elements count drops), what the new ruleset
// does not declare or declares differently deleted (a chain by its hook line, a set by its
// type and flags), counters it drops deleted, then the new table without the replace.
func TestReload(t *testing.T) {
	const head = "# a comment\ntable ip bnerd_vpn {}\ndelete table ip bnerd_vpn\ntable ip bnerd_vpn {\n"
	old := head + `	counter peer_a_in {}
	counter peer_b_in {}
	map peer_in_28 {
		type ipv4_addr : counter
		elements = { 203.0.113.0 : "peer_a_in", 203.0.113.16 : "peer_b_in" }
	}
	set drops_in_28 {
		type ipv4_addr
		flags dynamic
		counter
	}
	set fwd_grants_28 {
		type ipv4_addr . ipv4_addr . inet_proto . inet_service
		elements = { 203.0.113.0 . 100.64.7.10 . tcp . 443 }
	}
	set gone {
		type ipv4_addr
	}
	chain forward {
		type filter hook forward priority filter; policy drop;
		counter name ip saddr & 255.255.255.240 map @peer_in_28 drop
	}
	chain input {
		type filter hook input priority filter; policy accept;
		jump input_tunnel
	}
	chain input_tunnel {
		accept
	}
}
`
	next := head + `	counter peer_a_in {}
	counter peer_c_in {}
	map peer_in_28 {
		type ipv4_addr : counter
		elements = { 203.0.113.0 : "peer_a_in" }
	}
	map peer_in_27 {
		type ipv4_addr : counter
		elements = { 203.0.113.32 : "peer_c_in" }
	}
	set drops_in_28 {
		type ipv4_addr
		flags dynamic
		counter
	}
	set fwd_grants_28 {
		type ipv4_addr . ipv4_addr . inet_proto . inet_service
		flags interval
		elements = { 203.0.113.0/28 . 100.64.7.10 . tcp . 443 }
	}
	chain forward {
		type filter hook forward priority filter; policy accept;
		counter name ip saddr & 255.255.255.240 map @peer_in_28 drop
		counter name ip saddr & 255.255.255.224 map @peer_in_27 drop
	}
	chain input {
		type filter hook input priority filter; policy accept;
	}
}
`
	split := func(text string) Layout {
		l, err := Split(text)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	got, ok := Reload(split(old), split(next), next)
	if !ok {
		t.Fatal("refused")
	}
	want := `flush table ip bnerd_vpn
flush map ip bnerd_vpn peer_in_28
delete set ip bnerd_vpn fwd_grants_28
delete set ip bnerd_vpn gone
delete chain ip bnerd_vpn forward
delete chain ip bnerd_vpn input_tunnel
delete counter ip bnerd_vpn peer_b_in
` + strings.TrimPrefix(next, "# a comment\ntable ip bnerd_vpn {}\ndelete table ip bnerd_vpn\n")
	if got != want {
		t.Errorf("script:\n%s\nwant:\n%s", got, want)
	}

	// Texts Render does not write are refused: another table beside it, none replaced, a
	// set declared twice.
	for name, text := range map[string]string{
		"another table": next + "table ip other {\n}\n",
		"no replace":    strings.Replace(next, "delete table ip bnerd_vpn\n", "", 1),
		"a set twice":   strings.Replace(next, "\tchain input {", "\tset fwd_grants_28 {\n\t\ttype ipv4_addr\n\t}\n\tchain input {", 1),
	} {
		if _, ok := Reload(split(old), split(text), text); ok {
			t.Errorf("%s: not refused", name)
		}
		if _, ok := Reload(split(text), split(next), next); ok {
			t.Errorf("%s, as the table in force: not refused", name)
		}
	}
}
