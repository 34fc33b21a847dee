package model

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

const testWGKey = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="

// testGateway is a gateway with two exposures (an address and a Service) and one reverse
// exposure whose target 10.20.0.5 lies in 10.20.0.0/16.
func testGateway(proto vpnv1.Protocol) *vpnv1.VPNGateway {
	return gen.VPNGateway("tenant", "gw", gen.UID("gw-uid"), gen.Generation(3), gen.Protocol(proto),
		gen.FloatingIPPool("public"),
		gen.Exposure("internal-api", "100.70.7.10", gen.Port(443)),
		gen.ServiceExposure("metrics", "metrics", vpnv1.PortSpec{Port: 9090, Protocol: vpnv1.PortProtocolUDP, TargetPort: 19090}),
		gen.ReverseExposure("acme-erp", "10.20.0.5", gen.Port(1433)))
}

// testPeerKey is the WireGuard public key wgPeer gives the peer name: valid, distinct per name.
func testPeerKey(name string) string { return gen.WireGuardKey(name) }

// age sets the creation time to t0 plus minutes.
func age(minutes int) gen.MetaMod {
	return gen.CreatedAt(t0.Add(time.Duration(minutes) * time.Minute))
}

// ipsecPeer is the API's peer name of gateway tenant/gw (gen.VPNPeer's defaults) with the
// given subnets, as the model receives it: with a UID and generation.
func ipsecPeer(name string, subnets []string, opts ...gen.PeerMod) vpnv1.VPNPeer {
	return *gen.VPNPeer("tenant", name, append([]gen.PeerMod{
		gen.UID(types.UID(name + "-uid")), gen.Generation(1), gen.RemoteSubnets(subnets...),
	}, opts...)...)
}

// wgPeer is ipsecPeer as a WireGuard peer with the key testPeerKey(name).
func wgPeer(name string, subnets []string, opts ...gen.PeerMod) vpnv1.VPNPeer {
	return ipsecPeer(name, subnets, append([]gen.PeerMod{gen.WireGuardPeer(testPeerKey(name))}, opts...)...)
}

// testInput is a valid ipsec input with the given peers.
func testInput(peers ...vpnv1.VPNPeer) Input {
	return Input{
		Gateway:     testGateway(vpnv1.ProtocolIPsec),
		Peers:       peers,
		Config:      Config{PoolCIDR: DefaultPoolCIDR, InternalSourceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
		ServiceCIDR: netip.MustParsePrefix("100.64.3.0/24"),
		Services: map[string]ServiceTarget{"metrics": {
			Address: netip.MustParseAddr("10.96.0.20"),
			Ports:   map[ServicePort]uint16{{"udp", 19090}: 19090, {"tcp", 80}: 80},
		}},
	}
}

// checkNoPartialGrants asserts the model's grant invariants: every peer is either authorized
// with grant lists exactly as written (all of them under DefaultAllow), or dark with empty
// lists; GrantedTo and Grantee agree with the peers.
func checkNoPartialGrants(t *testing.T, in Input, gw *Gateway) {
	t.Helper()
	var allExp, allRev []string
	for _, e := range in.Gateway.Spec.Exposures {
		allExp = append(allExp, e.Name)
	}
	for _, r := range in.Gateway.Spec.ReverseExposures {
		allRev = append(allRev, r.Name)
	}
	allExp, allRev = uniqueSorted(allExp), uniqueSorted(allRev)
	specs := map[string]vpnv1.VPNPeer{}
	for _, p := range in.Peers {
		specs[p.Name] = p
	}
	if len(gw.Peers) != len(in.Peers) {
		t.Fatalf("model has %d peers, input %d", len(gw.Peers), len(in.Peers))
	}
	authorized := map[string]Peer{}
	for _, p := range gw.Peers {
		d := p.Authorization
		switch {
		case !d.Authorized:
			if d.Reason == ReasonDefaultAllow || d.Reason == ReasonAuthorized {
				t.Errorf("peer %s: not authorized with reason %s", p.Name, d.Reason)
			}
			if len(p.Exposures) != 0 || len(p.ReverseExposures) != 0 {
				t.Errorf("peer %s is dark (%s) but holds grants %v %v", p.Name, d.Reason, p.Exposures, p.ReverseExposures)
			}
		case d.Reason == ReasonDefaultAllow:
			authorized[p.Name] = p
			if len(in.Peers) != 1 || specs[p.Name].Spec.Authorization != nil {
				t.Errorf("peer %s: DefaultAllow with %d peers / block %v", p.Name, len(in.Peers), specs[p.Name].Spec.Authorization)
			}
			if !slices.Equal(p.Exposures, allExp) || !slices.Equal(p.ReverseExposures, allRev) {
				t.Errorf("peer %s: DefaultAllow grants %v %v, want all %v %v", p.Name, p.Exposures, p.ReverseExposures, allExp, allRev)
			}
		case d.Reason == ReasonAuthorized:
			authorized[p.Name] = p
			a := specs[p.Name].Spec.Authorization
			if a == nil {
				t.Fatalf("peer %s: Authorized without a block", p.Name)
			}
			if !slices.Equal(p.Exposures, uniqueSorted(a.Exposures)) || !slices.Equal(p.ReverseExposures, uniqueSorted(a.ReverseExposures)) {
				t.Errorf("peer %s: grants %v %v, block %v %v", p.Name, p.Exposures, p.ReverseExposures, a.Exposures, a.ReverseExposures)
			}
		default:
			t.Errorf("peer %s: authorized with reason %s", p.Name, d.Reason)
		}
	}
	for _, e := range gw.Exposures {
		var want []string
		for _, p := range gw.Peers {
			if _, ok := authorized[p.Name]; ok && slices.Contains(p.Exposures, e.Name) {
				want = append(want, p.Name)
			}
		}
		if !slices.Equal(e.GrantedTo, want) {
			t.Errorf("exposure %s: GrantedTo %v, want %v", e.Name, e.GrantedTo, want)
		}
	}
	for _, r := range gw.ReverseExposures {
		var holders []string
		for _, p := range gw.Peers {
			if _, ok := authorized[p.Name]; ok && slices.Contains(p.ReverseExposures, r.Name) {
				holders = append(holders, p.Name)
				if !prefixesContain(p.SourceCIDRs, r.Target) {
					t.Errorf("authorized peer %s holds reverse exposure %s whose target %s is outside %v", p.Name, r.Name, r.Target, p.SourceCIDRs)
				}
			}
		}
		if len(holders) > 1 {
			t.Errorf("reverse exposure %s has several authorized holders %v", r.Name, holders)
		}
		want := ""
		if len(holders) > 0 {
			want = holders[0]
		}
		if r.Grantee != want {
			t.Errorf("reverse exposure %s: Grantee %q, want %q", r.Name, r.Grantee, want)
		}
	}
}

func prefixesContain(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
