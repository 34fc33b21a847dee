package model

import (
	"net/netip"
	"slices"
	"testing"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// TestAuthorizeChainOrder walks the steps in order: peer "x" fails two of them and gets the
// reason of the earlier one; what the later one finds about the tunnel still happens when the
// earlier refusal leaves the peer a tunnel (steps 4 to 6), and not when it takes the tunnel
// (steps 1 and 3).
func TestAuthorizeChainOrder(t *testing.T) {
	ipsecGW := testGateway(vpnv1.ProtocolIPsec)
	scope := Scope{
		ServiceCIDR:    netip.MustParsePrefix("100.64.3.0/24"),
		LocalID:        "gw.example.com",
		RefusedSecrets: map[string]string{"tls": "kubernetes.io/tls"},
		Config:         Config{ClusterPodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
	}
	both := func(p vpnv1.VPNPeer) vpnv1.VPNPeer {
		p.Spec.WireGuard = &vpnv1.WireGuardPeer{PublicKey: testWGKey, Subnets: []string{"10.21.0.0/16"}}
		return p
	}
	older := ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants("metrics"), gen.RemoteID("same.example.com"), age(1))

	tests := []struct {
		name     string
		peers    []vpnv1.VPNPeer // "x" is the peer under test
		reason   string          // x's decision
		problems []string        // the gateway problems' reasons, in order
		tunnel   []string        // x's tunnel subnets
		withheld []string        // x's withheld subnets
	}{
		{
			name:     "1 protocol before 2 grants",
			peers:    []vpnv1.VPNPeer{both(ipsecPeer("x", []string{"10.30.0.0/16"}, gen.Grants("nope")))},
			reason:   ReasonProtocolMismatch,
			withheld: []string{"10.30.0.0/16"},
		},
		{
			name:     "1 protocol before 3 identity: no identity is taken",
			peers:    []vpnv1.VPNPeer{both(ipsecPeer("x", []string{"10.30.0.0/16"}, gen.RemoteID("%any")))},
			reason:   ReasonProtocolMismatch,
			withheld: []string{"10.30.0.0/16"},
		},
		{
			name: "1 protocol before 5 older subnets: no overlap is reported",
			peers: []vpnv1.VPNPeer{older,
				both(ipsecPeer("x", []string{"10.20.1.0/24"}, gen.Grants("metrics"), age(2)))},
			reason:   ReasonProtocolMismatch,
			withheld: []string{"10.20.1.0/24"},
		},
		{
			name: "2 grants is no refusal: a later refusal names the reason",
			peers: []vpnv1.VPNPeer{older,
				ipsecPeer("x", []string{"10.30.0.0/16"}, gen.RemoteID("same.example.com"), age(2))},
			reason:   ReasonDuplicateIdentity,
			problems: []string{ReasonIdentityConflict},
			withheld: []string{"10.30.0.0/16"},
		},
		{
			name:     "3 invalid identity before 3 credentials",
			peers:    []vpnv1.VPNPeer{ipsecPeer("x", []string{"10.30.0.0/16"}, gen.RemoteID("%any"), gen.PSKSecretRef("tls", gen.PSKKey))},
			reason:   ReasonInvalidIdentity,
			withheld: []string{"10.30.0.0/16"},
		},
		{
			name: "3 duplicate identity before 3 credentials",
			peers: []vpnv1.VPNPeer{older,
				ipsecPeer("x", []string{"10.30.0.0/16"}, gen.Grants("metrics"), gen.RemoteID("same.example.com"), gen.PSKSecretRef("tls", gen.PSKKey), age(2))},
			reason:   ReasonDuplicateIdentity,
			problems: []string{ReasonIdentityConflict},
			withheld: []string{"10.30.0.0/16"},
		},
		{
			name: "3 the gateway's own identity before 4 reserved ranges",
			peers: []vpnv1.VPNPeer{
				ipsecPeer("x", []string{"100.64.3.0/25"}, gen.RemoteID("gw.example.com"))},
			reason:   ReasonDuplicateIdentity,
			problems: []string{ReasonIdentityConflict},
			withheld: []string{"100.64.3.0/25"},
		},
		{
			name: "3 duplicate identity before 5 older subnets: no overlap is reported",
			peers: []vpnv1.VPNPeer{older,
				ipsecPeer("x", []string{"10.20.1.0/24"}, gen.Grants("metrics"), gen.RemoteID("same.example.com"), age(2))},
			reason:   ReasonDuplicateIdentity,
			problems: []string{ReasonIdentityConflict},
			withheld: []string{"10.20.1.0/24"},
		},
		{
			name:     "3 credentials before 4 reserved ranges",
			peers:    []vpnv1.VPNPeer{ipsecPeer("x", []string{"10.244.1.0/24"}, gen.PSKSecretRef("tls", gen.PSKKey))},
			reason:   ReasonCredentialsRefused,
			withheld: []string{"10.244.1.0/24"},
		},
		{
			name: "3 credentials before 5 older subnets: no overlap is reported",
			peers: []vpnv1.VPNPeer{older,
				ipsecPeer("x", []string{"10.20.1.0/24"}, gen.Grants("metrics"), gen.PSKSecretRef("tls", gen.PSKKey), age(2))},
			reason:   ReasonCredentialsRefused,
			withheld: []string{"10.20.1.0/24"},
		},
		{
			name: "4 reserved ranges before 5 older subnets: the overlap is still withheld and reported",
			peers: []vpnv1.VPNPeer{older,
				ipsecPeer("x", []string{"10.20.1.0/24", "100.64.3.0/25", "172.16.0.0/24"}, gen.Grants("metrics"), age(2))},
			reason:   ReasonSubnetOverlapsServiceCIDR,
			problems: []string{ReasonSubnetOverlap},
			tunnel:   []string{"172.16.0.0/24"},
			withheld: []string{"10.20.1.0/24", "100.64.3.0/25"},
		},
		{
			name:     "4 reserved ranges before 6 reverse targets: no reverse problem",
			peers:    []vpnv1.VPNPeer{ipsecPeer("x", []string{"10.30.0.0/16", "10.244.0.0/24"})},
			reason:   ReasonSubnetOverlapsClusterRange,
			tunnel:   []string{"10.30.0.0/16"},
			withheld: []string{"10.244.0.0/24"},
		},
		{
			name: "5 older subnets before 6 reverse targets",
			peers: []vpnv1.VPNPeer{older,
				ipsecPeer("x", []string{"10.20.1.0/24", "10.30.0.0/16"}, gen.ReverseGrants("acme-erp"), age(2))},
			reason:   ReasonSubnetConflict,
			problems: []string{ReasonSubnetOverlap},
			tunnel:   []string{"10.30.0.0/16"},
			withheld: []string{"10.20.1.0/24"},
		},
		{
			name:     "6 reverse targets, the last step",
			peers:    []vpnv1.VPNPeer{ipsecPeer("x", []string{"10.30.0.0/16"})},
			reason:   ReasonReverseExposureOutsideSubnets,
			problems: []string{ReasonReverseExposureConflict},
			tunnel:   []string{"10.30.0.0/16"},
		},
	}
	prefixes := func(ss []string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verdicts, problems := authorize(ipsecGW, tt.peers, scope)
			x, ok := verdicts["x"]
			if !ok {
				t.Fatal("no verdict for x")
			}
			if x.Authorized || x.Reason != tt.reason {
				t.Errorf("x: %v/%s (%q), want false/%s", x.Authorized, x.Reason, x.Message, tt.reason)
			}
			var reasons []string
			for _, p := range problems {
				reasons = append(reasons, p.Reason)
			}
			if !slices.Equal(reasons, tt.problems) {
				t.Errorf("problems %q, want reasons %q", problems, tt.problems)
			}
			if !slices.Equal(x.tunnel, prefixes(tt.tunnel)) || !slices.Equal(x.withheld, prefixes(tt.withheld)) {
				t.Errorf("x: tunnel %v withheld %v, want %v and %v", x.tunnel, x.withheld, tt.tunnel, tt.withheld)
			}
		})
	}
}

// TestAuthChainDecide: the chain keeps the first refusal; a refusal of the tunnel ends the
// walk, any other lets the later steps run without replacing the reason.
func TestAuthChainDecide(t *testing.T) {
	var ran []string
	step := func(name string, refuse, drop bool) authStep {
		return func(_ *authorization, st *peerAuth) (string, string, bool) {
			ran = append(ran, name)
			if drop {
				st.dropTunnel()
			}
			return name, name + " refused", !refuse
		}
	}
	tests := []struct {
		name    string
		chain   authChain
		reason  string // "" when nothing refuses
		ran     []string
		dropped bool
	}{
		{"none refuses", authChain{step("a", false, false), step("b", false, false)}, "", []string{"a", "b"}, false},
		{"the first refusal wins", authChain{step("a", false, false), step("b", true, false), step("c", true, false)}, "b", []string{"a", "b", "c"}, false},
		{"a dropped tunnel ends the walk", authChain{step("a", true, true), step("b", true, false)}, "a", []string{"a"}, true},
		{"a later dropped tunnel keeps the first reason", authChain{step("a", true, false), step("b", true, true), step("c", true, false)}, "a", []string{"a", "b"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ran = nil
			st := &peerAuth{subnets: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}}
			tt.chain.decide(&authorization{}, st)
			if st.decision.Reason != tt.reason || st.refused != (tt.reason != "") {
				t.Errorf("decision %+v (refused %v), want reason %q", st.decision, st.refused, tt.reason)
			}
			if tt.reason != "" && st.decision.Message != tt.reason+" refused" {
				t.Errorf("message %q, want the first refusal's", st.decision.Message)
			}
			if !slices.Equal(ran, tt.ran) {
				t.Errorf("ran %v, want %v", ran, tt.ran)
			}
			if st.noTunnel != tt.dropped || (tt.dropped && !slices.Equal(st.withheld, st.subnets)) {
				t.Errorf("noTunnel %v withheld %v, want dropped %v", st.noTunnel, st.withheld, tt.dropped)
			}
		})
	}
}
