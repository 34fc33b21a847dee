package labcloud

import (
	"slices"
	"strings"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/neutronfake"
)

// Port security as ML2 enforces it, rendered for the bridge's member links: a port sends only
// from its (MAC, fixed IP)s and its allowed address pairs (a pair's own MAC, a CIDR), IPv4 and
// ARP alike, and receives only broadcast, multicast and its MACs; a port without port
// security, a port that is not plugged in and a link that is no port's get no chains; a
// subport's chains name its VLAN and its parent's tap, within nft's comment length.
func TestPortSecurityRendersNeutronsPortSecurity(t *testing.T) {
	node := neutronfake.Port{ID: "0a0b0c0d-1111-4000-8000-000000000001", Name: "lab-node", MACAddress: "fa:16:3e:0a:0b:0c",
		FixedIPs: []neutronfake.FixedIP{{IPAddress: "100.100.0.2"}}, PortSecurityEnabled: true}
	gateway := neutronfake.Port{ID: "1a1b1c1d-2222-4000-8000-000000000002", Name: "bnerd-vpn-edge", MACAddress: "FA:16:3E:1A:1B:1C",
		FixedIPs: []neutronfake.FixedIP{{IPAddress: "100.100.0.3"}}, PortSecurityEnabled: true,
		AllowedAddressPairs: []neutronfake.AddressPair{
			{IPAddress: "100.100.0.128/25", MACAddress: "fa:16:3e:1a:1b:1c"},
			{IPAddress: "100.100.0.200", MACAddress: "fa:16:3e:99:99:99"},
			{IPAddress: "2001:db8::1", MACAddress: "fa:16:3e:1a:1b:1c"}, // IPv6: not this router's
		}}
	open := neutronfake.Port{ID: "2a2b2c2d-3333-4000-8000-000000000003", MACAddress: "fa:16:3e:2a:2b:2c",
		FixedIPs: []neutronfake.FixedIP{{IPAddress: "100.100.0.4"}}, PortSecurityEnabled: false}
	unplugged := neutronfake.Port{ID: "3a3b3c3d-4444-4000-8000-000000000004", MACAddress: "fa:16:3e:3a:3b:3c",
		FixedIPs: []neutronfake.FixedIP{{IPAddress: "100.100.0.5"}}, PortSecurityEnabled: true}
	trunks := []neutronfake.Trunk{{ID: "trunk-1", PortID: node.ID,
		SubPorts: []neutronfake.Subport{{PortID: gateway.ID, SegmentationType: "vlan", SegmentationID: 101}}}}
	members := []string{TapName(open.ID), TapName(gateway.ID), "veth-other", TapName(node.ID)}

	got := PortSecurity([]neutronfake.Port{node, gateway, open, unplugged}, trunks, members)
	want := `table bridge bnerd_lab_portsec
delete table bridge bnerd_lab_portsec
table bridge bnerd_lab_portsec {
  counter spoofed_0a0b0c0d-11 {}
  counter misdirected_0a0b0c0d-11 {}
  counter spoofed_1a1b1c1d-22 {}
  counter misdirected_1a1b1c1d-22 {}
  chain from_ports {
    type filter hook prerouting priority filter; policy accept;
    iifname vmap { "tap0a0b0c0d-11" : jump from_0a0b0c0d-11, "tap1a1b1c1d-22" : jump from_1a1b1c1d-22 }
  }
  chain to_ports {
    type filter hook postrouting priority filter; policy accept;
    oifname vmap { "tap0a0b0c0d-11" : jump to_0a0b0c0d-11, "tap1a1b1c1d-22" : jump to_1a1b1c1d-22 }
  }
  chain from_0a0b0c0d-11 {
    comment "port 0a0b0c0d-1111-4000-8000-000000000001 (lab-node): what it may send"
    ether type ip ether saddr fa:16:3e:0a:0b:0c ip saddr 100.100.0.2 accept
    ether type arp ether saddr fa:16:3e:0a:0b:0c arp saddr ether fa:16:3e:0a:0b:0c arp saddr ip 100.100.0.2 accept
    counter name "spoofed_0a0b0c0d-11" drop
  }
  chain to_0a0b0c0d-11 {
    comment "port 0a0b0c0d-1111-4000-8000-000000000001 (lab-node): what it may receive"
    ether daddr & 01:00:00:00:00:00 == 01:00:00:00:00:00 accept
    ether daddr { fa:16:3e:0a:0b:0c } accept
    counter name "misdirected_0a0b0c0d-11" drop
  }
  chain from_1a1b1c1d-22 {
    comment "port 1a1b1c1d-2222-4000-8000-000000000002 (bnerd-vpn-edge), vlan 101 on tap0a0b0c0d-11: what it may send"
    ether type ip ether saddr fa:16:3e:1a:1b:1c ip saddr 100.100.0.3 accept
    ether type arp ether saddr fa:16:3e:1a:1b:1c arp saddr ether fa:16:3e:1a:1b:1c arp saddr ip 100.100.0.3 accept
    ether type ip ether saddr fa:16:3e:1a:1b:1c ip saddr 100.100.0.128/25 accept
    ether type arp ether saddr fa:16:3e:1a:1b:1c arp saddr ether fa:16:3e:1a:1b:1c arp saddr ip 100.100.0.128/25 accept
    ether type ip ether saddr fa:16:3e:99:99:99 ip saddr 100.100.0.200 accept
    ether type arp ether saddr fa:16:3e:99:99:99 arp saddr ether fa:16:3e:99:99:99 arp saddr ip 100.100.0.200 accept
    counter name "spoofed_1a1b1c1d-22" drop
  }
  chain to_1a1b1c1d-22 {
    comment "port 1a1b1c1d-2222-4000-8000-000000000002 (bnerd-vpn-edge), vlan 101 on tap0a0b0c0d-11: what it may receive"
    ether daddr & 01:00:00:00:00:00 == 01:00:00:00:00:00 accept
    ether daddr { fa:16:3e:1a:1b:1c, fa:16:3e:99:99:99 } accept
    counter name "misdirected_1a1b1c1d-22" drop
  }
}
`
	if got != want {
		t.Fatalf("PortSecurity:\n%s\nwant:\n%s", got, want)
	}

	// nft takes comments of 128 characters: a long or odd name is left out.
	for _, name := range []string{"bnerd-vpn-0b7d1c1e-5a4e-4a43-9d6f-2f4a4f1f0001-with-a-name-too-long-for-it", `say "hi"`} {
		gateway.Name = name
		text := PortSecurity([]neutronfake.Port{node, gateway}, trunks, members)
		want := `comment "port 1a1b1c1d-2222-4000-8000-000000000002, vlan 101 on tap0a0b0c0d-11: what it may receive"`
		if !strings.Contains(text, want) {
			t.Errorf("the gateway's chain named %q, want %s:\n%s", name, want, text)
		}
	}

	// Nothing plugged in: the table and its two hooks, empty.
	empty := PortSecurity([]neutronfake.Port{node}, nil, nil)
	if strings.Contains(empty, "vmap") || strings.Contains(empty, "counter") || !strings.HasSuffix(empty, "  }\n}\n") {
		t.Fatalf("PortSecurity of no member links:\n%s", empty)
	}
}

func TestTapNameIsNeutrons(t *testing.T) {
	id := "5d6e7f80-1234-4abc-8def-0123456789ab"
	if got := TapName(id); got != "tap5d6e7f80-12" || len(got) > 15 {
		t.Fatalf("TapName(%s) = %q, want tap5d6e7f80-12 (a kernel link name)", id, got)
	}
}

// A trunk's subports get VLAN links only while its parent is plugged in (its tap is a link).
func TestSubportLinksFollowPluggedParents(t *testing.T) {
	trunks := []neutronfake.Trunk{
		{ID: "t1", PortID: "aaaaaaaa-aaaa-4000", SubPorts: []neutronfake.Subport{
			{PortID: "cccccccc-cccc-4000", SegmentationType: "vlan", SegmentationID: 102},
			{PortID: "bbbbbbbb-bbbb-4000", SegmentationType: "vlan", SegmentationID: 101},
		}},
		{ID: "t2", PortID: "dddddddd-dddd-4000", SubPorts: []neutronfake.Subport{
			{PortID: "eeeeeeee-eeee-4000", SegmentationType: "vlan", SegmentationID: 101},
		}},
	}
	got := SubportLinks(trunks, []string{"lo", "provider", "tapaaaaaaaa-aa"})
	want := []SubportLink{
		{Name: "tapbbbbbbbb-bb", Parent: "tapaaaaaaaa-aa", VLAN: 101},
		{Name: "tapcccccccc-cc", Parent: "tapaaaaaaaa-aa", VLAN: 102},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("SubportLinks = %+v, want %+v", got, want)
	}
}
