package labcloud

import (
	"strings"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/neutronfake"
)

func ptr[T any](v T) *T { return &v }

// Rules become nft matches as Neutron means them: protocol names by number (ESP included),
// port ranges, a remote group as its members' fixed IPs, egress as the destination; IPv6
// rules and a remote group without members admit nothing here; a port without a floating IP
// is filtered but not translated.
func TestRulesetMatchesNeutronRules(t *testing.T) {
	s := Snapshot{
		Ports: []neutronfake.Port{
			{ID: "p1", FixedIPs: []neutronfake.FixedIP{{IPAddress: "198.51.100.5"}}, SecurityGroups: []string{"g1"}},
			{ID: "p2", FixedIPs: []neutronfake.FixedIP{{IPAddress: "198.51.100.6"}}, SecurityGroups: []string{"g2"}},
		},
		FloatingIPs: []neutronfake.FloatingIP{
			{FloatingIPAddress: "203.0.113.9", PortID: ptr("p1"), FixedIPAddress: ptr("198.51.100.5")},
			{FloatingIPAddress: "203.0.113.10"}, // not associated
		},
		Groups: []neutronfake.SecurityGroup{
			{ID: "g1", Rules: []*neutronfake.Rule{
				{Direction: "ingress", EtherType: "IPv4", Protocol: ptr("udp"), PortRangeMin: ptr(500), PortRangeMax: ptr(500), RemoteIPPrefix: ptr("192.0.2.0/24")},
				{Direction: "ingress", EtherType: "IPv4", Protocol: ptr("esp")},
				{Direction: "ingress", EtherType: "IPv4", Protocol: ptr("tcp"), RemoteGroupID: ptr("g2")},
				{Direction: "ingress", EtherType: "IPv4", Protocol: ptr("udp"), RemoteGroupID: ptr("empty")},
				{Direction: "ingress", EtherType: "IPv6", Protocol: ptr("udp")},
				{Direction: "egress", EtherType: "IPv4"},
			}},
			{ID: "g2"},
		},
	}
	got := Ruleset(s, Links{Client: "cl", Provider: "pr"})
	for _, want := range []string{
		`iifname "cl" ip daddr 203.0.113.9 counter dnat to 198.51.100.5`,
		`oifname "cl" ip saddr 198.51.100.5 counter snat to 203.0.113.9`,
		`ip saddr 192.0.2.0/24 meta l4proto 17 udp dport 500-500 counter accept`,
		`meta l4proto 50 counter accept`,
		`ip saddr { 198.51.100.6 } meta l4proto 6 counter accept`,
		`oifname "pr" ip daddr 198.51.100.6 jump in_1`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("ruleset lacks %q:\n%s", want, got)
		}
	}
	for _, bad := range []string{"203.0.113.10", "198.51.100.6 counter", "snat to 203.0.113.10"} {
		if strings.Contains(got, bad) {
			t.Errorf("ruleset holds %q:\n%s", bad, got)
		}
	}
	if n := strings.Count(got, "counter accept"); n != 4 { // udp 500, esp, tcp from g2, all egress
		t.Errorf("%d accepting rules, want 4:\n%s", n, got)
	}
}
