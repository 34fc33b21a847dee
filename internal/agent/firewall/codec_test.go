package firewall

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
)

// Elements encode as nft 1.0.6 sends them (nft --debug=netlink, bytes in wire order).
func TestEncodeElements(t *testing.T) {
	cases := []struct {
		set  nft.SetContents
		elem string
		del  bool
		want string // netlink elements, "key[-keyEnd][=value|@objref][/flags]" joined by " "
	}{
		{nft.SetContents{Name: "fwd_grants", Type: "ipv4_addr . ipv4_addr . inet_proto . inet_service", Interval: true},
			"100.96.0.0/30 . 100.64.7.10 . tcp . 5201", false,
			"646000006440070a0600000014510000-646000036440070a0600000014510000"},
		{nft.SetContents{Name: "fwd_grants", Type: "ipv4_addr . ipv4_addr . inet_proto . inet_service", Interval: true},
			"192.0.2.77/32 . 100.64.7.11 . udp . 443", true,
			"c000024d6440070b1100000001bb0000-c000024d6440070b1100000001bb0000"},
		{nft.SetContents{Name: "peer_in", Map: true, Type: "ipv4_addr : counter", Interval: true},
			`100.96.0.0/30 : "peer_site-00000_in"`, false,
			"64600000@peer_site-00000_in 64600004/1"},
		{nft.SetContents{Name: "peer_in", Map: true, Type: "ipv4_addr : counter", Interval: true},
			`100.96.0.0/30 : "peer_site-00000_in"`, true,
			"64600000 64600004/1"},
		{nft.SetContents{Name: "fwd_dnat", Map: true, Type: "ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service"},
			"100.64.7.10 . tcp . 5201 : 192.0.2.10 . 5201", false,
			"6440070a0600000014510000=c000020a14510000"},
		{nft.SetContents{Name: "rev_dnat", Map: true, Type: "inet_proto . inet_service : ipv4_addr . inet_service"},
			"tcp . 20000 : 100.96.0.1 . 22", false,
			"060000004e200000=6460000100160000"},
		{nft.SetContents{Name: "rev_snat", Map: true, Type: "inet_service : ipv4_addr"}, "20000 : 100.64.7.20", false, "4e20=64400714"},
		{nft.SetContents{Name: "reverse_clients", Type: "ipv4_addr"}, "198.51.100.10", false, "c633640a"},
		// A grant class is a mark: in the host's byte order (these bytes: a little-endian host).
		{nft.SetContents{Name: "peer_28", Map: true, Type: "ipv4_addr : mark"}, "203.0.113.16 : 0x1234abcd", false, "cb007110=cdab3412"},
		{nft.SetContents{Name: "fwd_grants", Type: "mark . ipv4_addr . inet_proto . inet_service"},
			"0x1234abcd . 100.64.7.10 . tcp . 443", false, "cdab34126440070a0600000001bb0000"},
	}
	for _, c := range cases {
		codec, err := newSetCodec(c.set)
		if err != nil {
			t.Fatalf("%s: %v", c.set.Name, err)
		}
		els, err := codec.encode(c.elem, c.del)
		if err != nil {
			t.Fatalf("%s %q: %v", c.set.Name, c.elem, err)
		}
		var got []string
		for _, e := range els {
			s := hex.EncodeToString(e.key)
			if e.keyEnd != nil {
				s += "-" + hex.EncodeToString(e.keyEnd)
			}
			if e.value != nil {
				s += "=" + hex.EncodeToString(e.value)
			}
			if e.objref != "" {
				s += "@" + e.objref
			}
			if e.flags != 0 {
				s += fmt.Sprintf("/%d", e.flags)
			}
			got = append(got, s)
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("%s %q (deletion %v):\n got %s\nwant %s", c.set.Name, c.elem, c.del, strings.Join(got, " "), c.want)
		}
	}
}

// What the encoder does not know, or nft would write otherwise, is refused: the change is
// then loaded whole.
func TestEncodeRefuses(t *testing.T) {
	peerIn := nft.SetContents{Name: "peer_in", Map: true, Type: "ipv4_addr : counter", Interval: true}
	for _, c := range []struct {
		set  nft.SetContents
		elem string
	}{
		{peerIn, `0.0.0.0/8 : "peer_a_in"`},                           // starts at 0.0.0.0
		{peerIn, `255.255.255.0/24 : "peer_a_in"`},                    // ends at the last address
		{peerIn, `10.0.0.0/8 : peer_a_in`},                            // not quoted
		{peerIn, `10.0.0.0/8`},                                        // no value
		{peerIn, `10.0.0.1/8 : "peer_a_in"`},                          // host bits
		{nft.SetContents{Name: "h", Type: "ipv4_addr"}, "10.0.0.0/8"}, // a prefix without flags interval
		{nft.SetContents{Name: "h", Type: "ipv4_addr . inet_service"}, "10.0.0.1"},
		{nft.SetContents{Name: "h", Type: "inet_service"}, "70000"},
		{nft.SetContents{Name: "h", Type: "inet_proto"}, "sctp"},
	} {
		codec, err := newSetCodec(c.set)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := codec.encode(c.elem, false); err == nil {
			t.Errorf("%s: %q encoded", c.set.Name, c.elem)
		}
	}
	for _, s := range []nft.SetContents{
		{Name: "v", Map: true, Type: "ipv4_addr : verdict"},
		{Name: "m", Map: true, Type: "ipv4_addr : ether_addr"},
		{Name: "i", Type: "inet_service", Interval: true},
		{Name: "x", Map: false, Type: "ipv4_addr : ipv4_addr"},
	} {
		if _, err := newSetCodec(s); err == nil {
			t.Errorf("set %+v accepted", s)
		}
	}
}

// The listing a delta leaves, computed from the listing before it, is the listing of the
// table edited the same way.
func TestApplyToListing(t *testing.T) {
	peerIn := nft.SetContents{Name: "peer_in", Map: true, Type: "ipv4_addr : counter", Interval: true}
	empty := nft.SetContents{Name: "empty", Type: "ipv4_addr"}
	fwdDNAT := nft.SetContents{Name: "fwd_dnat", Map: true, Type: "ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service"}
	d := nft.Delta{
		AddCounters: []string{"peer_0_in", "peer_c_in"},
		DelCounters: []string{"peer_b_in"},
		Sets: []nft.SetDelta{
			{Set: peerIn, Del: []string{`203.0.113.0/28 : "peer_b_in"`, `203.0.113.16/28 : "peer_b_in"`}, Add: []string{`192.0.2.7/32 : "peer_c_in"`}},
			{Set: empty, Add: []string{"192.0.2.9"}},
			{Set: fwdDNAT, Del: []string{"100.64.7.10 . tcp . 443 : 192.0.2.10 . 443", "100.64.7.11 . tcp . 5432 : 192.0.2.20 . 5432", "100.64.7.12 . tcp . 22 : 192.0.2.30 . 22"}},
		},
	}
	edited := strings.NewReplacer(
		"\tcounter peer_b_in {\n\t}\n", "\tcounter peer_c_in {\n\t}\n\tcounter peer_0_in {\n\t}\n",
		`elements = { 198.51.100.0/25 : "peer_a_in", 203.0.113.0/28 : "peer_b_in",
			     203.0.113.16/28 : "peer_b_in" }`, `elements = { 192.0.2.7 : "peer_c_in", 198.51.100.0/25 : "peer_a_in" }`,
		"\tset empty {\n\t\ttype ipv4_addr\n\t}", "\tset empty {\n\t\ttype ipv4_addr\n\t\telements = { 192.0.2.9 }\n\t}",
		`		elements = { 100.64.7.12 . tcp . 22 : 192.0.2.30 . 22,
			     100.64.7.11 . tcp . 5432 : 192.0.2.20 . 5432,
			     100.64.7.10 . tcp . 443 : 192.0.2.10 . 443 }
`, "",
	).Replace(listed)
	if edited == listed {
		t.Fatal("the edit did not apply")
	}
	got, want := applyToListing(normalizeListing(listed), d), normalizeListing(edited)
	if diff := listingDiff(want, got); diff != "" {
		t.Errorf("%s\ngot:\n%s", diff, strings.Join(got, "\n"))
	}
}

// A set's elements go in as many messages as they fill, each list within a netlink
// attribute's 64 KiB.
func TestDeltaMessagesChunked(t *testing.T) {
	grants := nft.SetContents{Name: "fwd_grants", Type: "ipv4_addr . ipv4_addr . inet_proto . inet_service", Interval: true}
	var add []string
	for i := range 3000 {
		add = append(add, fmt.Sprintf("100.96.%d.%d/30 . 100.64.7.10 . tcp . 443", i/64, i%64*4))
	}
	msgs, err := deltaMessages(nft.Delta{Sets: []nft.SetDelta{{Set: grants, Add: add}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) < 3 {
		t.Fatalf("3,000 grants in %d messages", len(msgs))
	}
	for i, m := range msgs {
		if len(m.Data) > 65535 {
			t.Errorf("message %d carries %d bytes", i, len(m.Data))
		}
	}
}
