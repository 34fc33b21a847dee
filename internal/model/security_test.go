package model

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// The rules of docs/design.md "Security model" that the model decides: one source one tunnel, a PSK
// proves one identity, nothing reaches what the cluster did not offer.

func TestAuthorizeIdentities(t *testing.T) {
	ipsecGW := testGateway(vpnv1.ProtocolIPsec)
	ipsecGW.Spec.ReverseExposures = nil
	wgGW := testGateway(vpnv1.ProtocolWireGuard)
	wgGW.Spec.ReverseExposures = nil
	tests := []struct {
		name    string
		gw      *vpnv1.VPNGateway
		localID string
		peers   []vpnv1.VPNPeer
		want    map[string]wantDecision
		tunnel  map[string]bool
		problem string
	}{
		{
			name: "same remote ID: the younger gets no tunnel",
			gw:   ipsecGW,
			peers: []vpnv1.VPNPeer{
				ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants("metrics"), gen.RemoteID("site.example.com"), age(1)),
				ipsecPeer("b", []string{"10.30.0.0/16"}, gen.Grants("metrics"), gen.RemoteID("site.example.com"), age(2)),
			},
			want: map[string]wantDecision{
				"a": {true, ReasonAuthorized, ""},
				"b": {false, ReasonDuplicateIdentity, `IKE identity "site.example.com" is already that of older peer "a"; only the older one gets a tunnel`},
			},
			tunnel:  map[string]bool{"a": true, "b": false},
			problem: `peers "a" and "b" have the same IKE identity "site.example.com"; only the older, "a", gets a tunnel`,
		},
		{
			name: "IDs equal as strongSwan compares them (case, leading @) are the same identity",
			gw:   ipsecGW,
			peers: []vpnv1.VPNPeer{
				ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants("metrics"), gen.RemoteID("Site.Example.com"), age(1)),
				ipsecPeer("b", []string{"10.30.0.0/16"}, gen.Grants("metrics"), gen.RemoteID("@site.example.COM"), age(2)),
			},
			want: map[string]wantDecision{
				"a": {true, ReasonAuthorized, ""},
				"b": {false, ReasonDuplicateIdentity, ""},
			},
			tunnel: map[string]bool{"a": true, "b": false},
		},
		{
			name: "a dark peer cannot take a victim's identity through a type prefix",
			gw:   ipsecGW,
			peers: []vpnv1.VPNPeer{
				ipsecPeer("victim", []string{"10.20.0.0/16"}, gen.Grants("metrics"), gen.RemoteID("victim2.example.com"), age(1)),
				ipsecPeer("dark", []string{"10.30.0.0/16"}, gen.Grants(), gen.RemoteID("fqdn:victim2.example.com"), age(2)),
				ipsecPeer("mail", []string{"10.40.0.0/16"}, gen.Grants("metrics"), gen.RemoteID("ops@example.com"), age(3)),
				ipsecPeer("mail-alias", []string{"10.50.0.0/16"}, gen.Grants(), gen.RemoteID("rfc822:OPS@example.com"), age(4)),
				ipsecPeer("dn", []string{"10.60.0.0/16"}, gen.Grants("metrics"), gen.RemoteID("C=CH, O=Acme, CN=site"), age(5)),
				ipsecPeer("dn-alias", []string{"10.70.0.0/16"}, gen.Grants(), gen.RemoteID("/c=ch/o=ACME/cn=Site"), age(6)),
			},
			want: map[string]wantDecision{
				"victim":     {true, ReasonAuthorized, ""},
				"dark":       {false, ReasonDuplicateIdentity, `IKE identity "fqdn:victim2.example.com" is already that of older peer "victim"; only the older one gets a tunnel`},
				"mail":       {true, ReasonAuthorized, ""},
				"mail-alias": {false, ReasonDuplicateIdentity, ""},
				"dn":         {true, ReasonAuthorized, ""},
				"dn-alias":   {false, ReasonDuplicateIdentity, ""},
			},
			tunnel: map[string]bool{"victim": true, "dark": false, "mail": true, "mail-alias": false, "dn": true, "dn-alias": false},
		},
		{
			name:    "identities naming ranges, key IDs or the gateway itself in another spelling are refused",
			gw:      ipsecGW,
			localID: "192.0.2.1",
			peers: []vpnv1.VPNPeer{
				ipsecPeer("own", []string{"10.20.0.0/16"}, gen.Grants("metrics"), gen.RemoteID("ipv4:192.0.2.1"), age(1)),
				ipsecPeer("net", []string{"10.30.0.0/16"}, gen.Grants("metrics"), gen.RemoteID("ipv4net:198.51.100.0/24"), age(2)),
				ipsecPeer("plain-net", []string{"10.40.0.0/16"}, gen.Grants("metrics"), gen.RemoteID("198.51.100.0/24"), age(3)),
				ipsecPeer("range", []string{"10.50.0.0/16"}, gen.Grants("metrics"), gen.RemoteID("192.0.2.10-192.0.2.20"), age(4)),
				ipsecPeer("keyid", []string{"10.60.0.0/16"}, gen.Grants("metrics"), gen.RemoteID("keyid:0a0b0c"), age(5)),
			},
			want: map[string]wantDecision{
				"own":       {false, ReasonInvalidIdentity, `IKE identity "ipv4:192.0.2.1" the ipv4: prefix makes strongSwan keep the text as the address, which no site's identity equals: write the address without a prefix; a pre-shared key must prove exactly one identity`},
				"net":       {false, ReasonInvalidIdentity, `IKE identity "ipv4net:198.51.100.0/24" names a subnet, not one identity; a pre-shared key must prove exactly one identity`},
				"plain-net": {false, ReasonInvalidIdentity, `IKE identity "198.51.100.0/24" names a subnet, not one identity; a pre-shared key must prove exactly one identity`},
				"range":     {false, ReasonInvalidIdentity, `IKE identity "192.0.2.10-192.0.2.20" names an address range, not one identity; a pre-shared key must prove exactly one identity`},
				"keyid":     {false, ReasonInvalidIdentity, `IKE identity "keyid:0a0b0c" is a key ID, which a pre-shared key cannot be bound to; a pre-shared key must prove exactly one identity`},
			},
			tunnel: map[string]bool{"own": false, "net": false, "plain-net": false, "range": false, "keyid": false},
		},
		{
			name:    "the gateway's own identity in another spelling",
			gw:      ipsecGW,
			localID: "vpn.example.net",
			peers: []vpnv1.VPNPeer{
				ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants("metrics"), gen.RemoteID("dns:VPN.example.net"), age(1)),
			},
			want:    map[string]wantDecision{"a": {false, ReasonDuplicateIdentity, `IKE identity "dns:VPN.example.net" is the gateway's own IKE identity; a peer must present its own`}},
			tunnel:  map[string]bool{"a": false},
			problem: `peer "a" presents the gateway's own IKE identity "dns:VPN.example.net"; it gets no tunnel`,
		},
		{
			name: "one WireGuard key in two base64 spellings is one identity",
			gw:   wgGW,
			peers: []vpnv1.VPNPeer{
				wgPeer("a", []string{"10.20.0.0/16"}, gen.Grants("metrics"), age(1)),
				func() vpnv1.VPNPeer {
					p := wgPeer("b", []string{"10.30.0.0/16"}, gen.Grants(), age(2))
					k := testPeerKey("a")
					p.Spec.WireGuard.PublicKey = k[:42] + string(base64Next(k[42])) + "="
					return p
				}(),
			},
			want: map[string]wantDecision{
				"a": {true, ReasonAuthorized, ""},
				"b": {false, ReasonDuplicateIdentity, ""},
			},
			tunnel: map[string]bool{"a": true, "b": false},
		},
		{
			name: "the ID defaults to the address: two peers at one address without IDs collide",
			gw:   ipsecGW,
			peers: []vpnv1.VPNPeer{
				ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants("metrics"), gen.RemoteID(""), age(1)),
				ipsecPeer("b", []string{"10.30.0.0/16"}, gen.Grants("metrics"), gen.RemoteID(""), age(2)),
			},
			want: map[string]wantDecision{
				"a": {true, ReasonAuthorized, ""},
				"b": {false, ReasonDuplicateIdentity, `IKE identity "203.0.113.9" is already that of older peer "a"; only the older one gets a tunnel`},
			},
			tunnel: map[string]bool{"a": true, "b": false},
		},
		{
			name:    "a peer presenting the gateway's own identity",
			gw:      ipsecGW,
			localID: "vpn.example.net",
			peers: []vpnv1.VPNPeer{
				ipsecPeer("a", []string{"10.20.0.0/16"}, gen.RemoteID("VPN.example.net")),
			},
			want:    map[string]wantDecision{"a": {false, ReasonDuplicateIdentity, `IKE identity "VPN.example.net" is the gateway's own IKE identity; a peer must present its own`}},
			tunnel:  map[string]bool{"a": false},
			problem: `peer "a" presents the gateway's own IKE identity "VPN.example.net"; it gets no tunnel`,
		},
		{
			name: "a wildcard ID (admitted before the admission rule) proves nothing",
			gw:   ipsecGW,
			peers: []vpnv1.VPNPeer{
				ipsecPeer("a", []string{"10.20.0.0/16"}, gen.RemoteID("*.example.com")),
				ipsecPeer("b", []string{"10.30.0.0/16"}, gen.RemoteID(""), gen.RemoteAddress("%any")),
			},
			want: map[string]wantDecision{
				"a": {false, ReasonInvalidIdentity, `IKE identity "*.example.com" contains a wildcard (*), so it matches more than one identity; a pre-shared key must prove exactly one identity`},
				"b": {false, ReasonInvalidIdentity, `IKE identity "%any" is one of strongSwan's special values (%any matches any identity); a pre-shared key must prove exactly one identity`},
			},
			tunnel: map[string]bool{"a": false, "b": false},
		},
		{
			name: "same WireGuard public key: the younger gets no tunnel",
			gw:   wgGW,
			peers: []vpnv1.VPNPeer{
				wgPeer("a", []string{"10.20.0.0/16"}, gen.Grants("metrics"), age(1)),
				func() vpnv1.VPNPeer {
					p := wgPeer("b", []string{"10.30.0.0/16"}, gen.Grants("metrics"), age(2))
					p.Spec.WireGuard.PublicKey = testPeerKey("a")
					return p
				}(),
			},
			want: map[string]wantDecision{
				"a": {true, ReasonAuthorized, ""},
				"b": {false, ReasonDuplicateIdentity, `WireGuard public key "` + testPeerKey("a") + `" is already that of older peer "a"; only the older one gets a tunnel`},
			},
			tunnel: map[string]bool{"a": true, "b": false},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := testInput(tt.peers...)
			in.Gateway = tt.gw
			in.PublicAddress = tt.localID
			gw, errs := Build(in)
			if len(errs) > 0 {
				t.Fatalf("build: %v", errs)
			}
			checkDecisions(t, gw, tt.want)
			for _, p := range gw.Peers {
				if got := p.HasTunnel(); got != tt.tunnel[p.Name] {
					t.Errorf("%s: has tunnel %v, want %v (tunnel %v, withheld %v)", p.Name, got, tt.tunnel[p.Name], p.SourceCIDRs, p.WithheldCIDRs)
				}
			}
			if tt.problem != "" && !slices.ContainsFunc(gw.Problems, func(p Problem) bool {
				return p.Reason == ReasonIdentityConflict && p.Message == tt.problem
			}) {
				t.Errorf("problems %+v lack %q", gw.Problems, tt.problem)
			}
			checkNoPartialGrants(t, in, gw)
		})
	}
}

func TestAuthorizeReservedRanges(t *testing.T) {
	cfg := Config{
		PoolCIDR:            DefaultPoolCIDR,
		InternalSourceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		ClusterPodCIDRs:     []netip.Prefix{netip.MustParsePrefix("100.96.0.0/16")},
		ClusterServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("100.97.0.0/16")},
		NodeCIDRs:           []netip.Prefix{netip.MustParsePrefix("192.0.2.0/28")},
	}
	tests := []struct {
		name     string
		subnets  []string
		reason   string
		message  string
		tunnel   []string
		withheld []string
	}{
		{"a subnet overlapping the gateway's service CIDR", []string{"10.20.0.0/16", "100.64.3.128/25"}, ReasonSubnetOverlapsServiceCIDR,
			"100.64.3.128/25 overlaps the gateway's service CIDR 100.64.3.0/24; these subnets get no tunnel and the peer is dark until they are removed",
			[]string{"10.20.0.0/16"}, []string{"100.64.3.128/25"}},
		{"a subnet covering the service CIDR", []string{"100.64.0.0/10"}, ReasonSubnetOverlapsServiceCIDR, "", nil, []string{"100.64.0.0/10"}},
		{"the pod CIDR", []string{"100.96.4.0/24"}, ReasonSubnetOverlapsClusterRange,
			"100.96.4.0/24 overlaps the cluster's pod CIDR 100.96.0.0/16; these subnets get no tunnel and the peer is dark until they are removed",
			nil, []string{"100.96.4.0/24"}},
		{"the cluster's service CIDR", []string{"100.97.0.0/24"}, ReasonSubnetOverlapsClusterRange, "", nil, []string{"100.97.0.0/24"}},
		{"the node network", []string{"192.0.2.0/24"}, ReasonSubnetOverlapsClusterRange, "", nil, []string{"192.0.2.0/24"}},
		{"the internal sources", []string{"10.0.0.0/8"}, ReasonSubnetOverlapsClusterRange, "", nil, []string{"10.0.0.0/8"}},
		{"none: authorized", []string{"10.20.0.0/16"}, ReasonDefaultAllow, "", []string{"10.20.0.0/16"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := testInput(ipsecPeer("a", tt.subnets))
			in.Gateway.Spec.ReverseExposures = nil
			in.Config = cfg
			gw, errs := Build(in)
			if len(errs) > 0 {
				t.Fatalf("build: %v", errs)
			}
			p := gw.Peers[0]
			if p.Authorization.Reason != tt.reason || p.Authorization.Authorized != (tt.reason == ReasonDefaultAllow) {
				t.Errorf("decision %+v, want %s", p.Authorization, tt.reason)
			}
			if tt.message != "" && p.Authorization.Message != tt.message {
				t.Errorf("message\n got  %q\n want %q", p.Authorization.Message, tt.message)
			}
			if got := prefixStrings(p.SourceCIDRs); !slices.Equal(got, tt.tunnel) {
				t.Errorf("tunnel %v, want %v", got, tt.tunnel)
			}
			if got := prefixStrings(p.WithheldCIDRs); !slices.Equal(got, tt.withheld) {
				t.Errorf("withheld %v, want %v", got, tt.withheld)
			}
			checkNoPartialGrants(t, in, gw)
		})
	}

	// The peer controller decides with the same scope: its decision is the model's.
	in := testInput(ipsecPeer("a", []string{"100.96.4.0/24"}))
	d, _ := Authorize(in.Gateway, in.Peers, Scope{Config: cfg})
	if d["a"].Reason != ReasonSubnetOverlapsClusterRange {
		t.Errorf("Authorize: %+v", d["a"])
	}
}

func TestAuthorizeDarkOverlapGetsNoTunnelForIt(t *testing.T) {
	// The attack: a younger peer with no block on a multi-peer gateway, one subnet of
	// its own and one inside an authorized peer's LAN.
	in := testInput(
		ipsecPeer("hq", []string{"10.20.0.0/16"}, gen.Grants("metrics"), age(1)),
		ipsecPeer("intruder", []string{"10.20.7.0/29", "172.16.9.0/24"}, age(2)),
	)
	in.Gateway.Spec.ReverseExposures = nil
	gw, errs := Build(in)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	hq, intruder := gw.Peers[0], gw.Peers[1]
	if !hq.Authorization.Authorized || !slices.Equal(prefixStrings(hq.SourceCIDRs), []string{"10.20.0.0/16"}) {
		t.Errorf("hq %+v", hq)
	}
	if intruder.Authorization.Reason != ReasonSubnetConflict {
		t.Errorf("intruder decision %+v", intruder.Authorization)
	}
	if got := prefixStrings(intruder.SourceCIDRs); !slices.Equal(got, []string{"172.16.9.0/24"}) {
		t.Errorf("intruder tunnel %v, want only its own subnet", got)
	}
	if got := prefixStrings(intruder.WithheldCIDRs); !slices.Equal(got, []string{"10.20.7.0/29"}) {
		t.Errorf("intruder withheld %v", got)
	}
}

// TestTunnelsPairwiseDisjoint: whatever the peers (ages, subnets, identities, blocks), the
// subnets the model gives tunnels never overlap between two peers, each declared subnet is
// either carried or withheld, and a peer with anything withheld is dark.
func TestTunnelsPairwiseDisjoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 10))
	for iter := 0; iter < 2000; iter++ {
		gwProto := vpnv1.ProtocolIPsec
		if rng.IntN(2) == 0 {
			gwProto = vpnv1.ProtocolWireGuard
		}
		n := 1 + rng.IntN(6)
		var peers []vpnv1.VPNPeer
		for i := 0; i < n; i++ {
			var subnets []string
			for k := 0; k < 1+rng.IntN(3); k++ {
				bits := 8 + rng.IntN(21)
				a := netip.AddrFrom4([4]byte{10, byte(rng.IntN(3)), byte(rng.IntN(4)), byte(rng.IntN(2) * 128)})
				subnets = append(subnets, netip.PrefixFrom(a, bits).Masked().String())
			}
			slices.Sort(subnets)
			subnets = slices.Compact(subnets)
			var opts []gen.PeerMod
			opts = append(opts, age(rng.IntN(4)))
			switch rng.IntN(3) {
			case 0:
				opts = append(opts, gen.Grants("metrics"))
			case 1:
				opts = append(opts, gen.Grants())
			}
			name := fmt.Sprintf("p%d", i)
			var p vpnv1.VPNPeer
			if gwProto == vpnv1.ProtocolIPsec {
				p = ipsecPeer(name, subnets, append(opts, gen.RemoteID(fmt.Sprintf("site%d.example.com", rng.IntN(n))))...)
			} else {
				p = wgPeer(name, subnets, opts...)
				p.Spec.WireGuard.PublicKey = testPeerKey(fmt.Sprint(rng.IntN(n)))
			}
			peers = append(peers, p)
		}
		in := testInput(peers...)
		in.Gateway = testGateway(gwProto)
		in.Gateway.Spec.ReverseExposures = nil
		gw, errs := Build(in)
		if len(errs) > 0 {
			t.Fatalf("iteration %d: %v", iter, errs)
		}
		checkNoPartialGrants(t, in, gw)
		if err := Verify(gw); err != nil {
			t.Fatalf("iteration %d: a built model does not verify: %v", iter, err)
		}
		for i, a := range gw.Peers {
			declared := prefixStrings(parsedSubnets(peerSubnets(in.Gateway, &in.Peers[slices.IndexFunc(in.Peers, func(p vpnv1.VPNPeer) bool { return p.Name == a.Name })])))
			both := append(prefixStrings(a.SourceCIDRs), prefixStrings(a.WithheldCIDRs)...)
			slices.Sort(both)
			slices.Sort(declared)
			if !slices.Equal(both, declared) {
				t.Fatalf("iteration %d: %s carries %v and withholds %v of %v", iter, a.Name, a.SourceCIDRs, a.WithheldCIDRs, declared)
			}
			if len(a.WithheldCIDRs) > 0 && a.Authorization.Authorized {
				t.Fatalf("iteration %d: %s is authorized with withheld subnets %v", iter, a.Name, a.WithheldCIDRs)
			}
			for _, b := range gw.Peers[i+1:] {
				for _, x := range a.SourceCIDRs {
					if slices.ContainsFunc(b.SourceCIDRs, x.Overlaps) {
						t.Fatalf("iteration %d: tunnels of %s %v and %s %v overlap", iter, a.Name, a.SourceCIDRs, b.Name, b.SourceCIDRs)
					}
				}
			}
		}
	}
}

func TestBuildTargetRefusals(t *testing.T) {
	type wantErr struct{ reason, field, detail string }
	tests := []struct {
		name   string
		mutate func(in *Input)
		want   *wantErr
	}{
		{"cloud metadata", func(in *Input) { in.Gateway.Spec.Exposures[0].Target.Address = "169.254.169.254" },
			&wantErr{ReasonTargetReserved, "spec.exposures[0].target.address", "target 169.254.169.254 is a loopback, link-local, multicast, unspecified or broadcast address"}},
		{"loopback", func(in *Input) { in.Gateway.Spec.Exposures[0].Target.Address = "127.0.0.1" },
			&wantErr{ReasonTargetReserved, "spec.exposures[0].target.address", ""}},
		{"a node's address", func(in *Input) { in.NodeAddresses = []netip.Addr{netip.MustParseAddr("100.70.7.10")} },
			&wantErr{ReasonTargetIsNodeAddress, "spec.exposures[0].target.address", "target 100.70.7.10 is the address of a cluster node"}},
		{"a Service resolving to a node's address (host network endpoint)", func(in *Input) {
			in.NodeAddresses = []netip.Addr{netip.MustParseAddr("10.96.0.20")}
		}, &wantErr{ReasonTargetIsNodeAddress, "spec.exposures[1].target.service.name", `target 10.96.0.20 (service "metrics") is the address of a cluster node`}},
		{"the gateway's own service CIDR", func(in *Input) { in.Gateway.Spec.Exposures[0].Target.Address = "100.64.3.77" },
			&wantErr{ReasonTargetInServiceCIDR, "spec.exposures[0].target.address", "target 100.64.3.77 lies in the gateway's own service CIDR 100.64.3.0/24"}},
		{"another gateway's service CIDR", func(in *Input) {
			in.OtherServiceCIDRs = []GatewayCIDR{{Gateway: "other/gw", CIDR: netip.MustParsePrefix("100.70.7.0/24")}}
		}, &wantErr{ReasonTargetInServiceCIDR, "spec.exposures[0].target.address", "target 100.70.7.10 lies in the service CIDR 100.70.7.0/24 of gateway other/gw"}},
		{"outside the admin's allowed ranges", func(in *Input) {
			in.Config.AllowedTargetCIDRs = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}
		}, &wantErr{ReasonTargetNotAllowed, "spec.exposures[0].target.address", "target 100.70.7.10 is outside the allowed target ranges 10.96.0.0/12 set by the cluster admin"}},
		{"inside the admin's allowed ranges", func(in *Input) {
			in.Config.AllowedTargetCIDRs = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("100.70.0.0/16")}
		}, nil},
		{"the published example's target 100.64.7.10 with the defaults", func(in *Input) {
			in.Gateway.Spec.Exposures[0].Target.Address = "100.64.7.10"
			in.OtherServiceCIDRs = []GatewayCIDR{{Gateway: "t/other", CIDR: netip.MustParsePrefix("100.64.4.0/24")}}
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := testInput(ipsecPeer("a", []string{"10.20.0.0/16"}))
			tt.mutate(&in)
			gw, errs := Build(in)
			if tt.want == nil {
				if len(errs) > 0 || gw == nil {
					t.Fatalf("errors %v", errs)
				}
				return
			}
			if gw != nil || len(errs) != 1 {
				t.Fatalf("want one error, got %v (model %v)", errs, gw != nil)
			}
			e := errs[0]
			if e.Reason != tt.want.reason || e.Field != tt.want.field || (tt.want.detail != "" && e.Detail != tt.want.detail) {
				t.Errorf("got %s %s %q\nwant %s %s %q", e.Reason, e.Field, e.Detail, tt.want.reason, tt.want.field, tt.want.detail)
			}
		})
	}
}

// checkDecisions compares decisions by peer name (message only where wanted).
func checkDecisions(t *testing.T, gw *Gateway, want map[string]wantDecision) {
	t.Helper()
	for _, p := range gw.Peers {
		w, ok := want[p.Name]
		if !ok {
			t.Errorf("unexpected peer %s", p.Name)
			continue
		}
		d := p.Authorization
		if d.Authorized != w.authorized || d.Reason != w.reason {
			t.Errorf("%s: got %v/%s (%q), want %v/%s", p.Name, d.Authorized, d.Reason, d.Message, w.authorized, w.reason)
		}
		if w.message != "" && d.Message != w.message {
			t.Errorf("%s: message\n got  %q\n want %q", p.Name, d.Message, w.message)
		}
	}
}

func prefixStrings(ps []netip.Prefix) []string {
	if len(ps) == 0 {
		return nil
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

func TestCredentialsRefused(t *testing.T) {
	in := testInput(
		ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants("metrics"), age(1)),
		ipsecPeer("b", []string{"10.30.0.0/16"}, gen.Grants("metrics"), age(2)),
	)
	in.Gateway.Spec.ReverseExposures = nil
	in.RefusedSecrets = map[string]string{"a-psk": "kubernetes.io/service-account-token"}
	gw, errs := Build(in)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	a, b := gw.Peers[0], gw.Peers[1]
	if a.Authorization.Authorized || a.Authorization.Reason != ReasonCredentialsRefused || a.HasTunnel() ||
		a.Authorization.Message != `Secret "a-psk" is of type "kubernetes.io/service-account-token": tunnel credentials must be kept in an Opaque Secret; the peer gets no tunnel` {
		t.Errorf("a: %+v tunnel %v", a.Authorization, a.SourceCIDRs)
	}
	if !b.Authorization.Authorized || !b.HasTunnel() {
		t.Errorf("b: %+v", b.Authorization)
	}
	for _, typ := range []string{"", "Opaque"} {
		if !CredentialSecretAllowed(typ) {
			t.Errorf("%q refused", typ)
		}
	}
	for _, typ := range []string{"kubernetes.io/service-account-token", "kubernetes.io/tls", "kubernetes.io/dockerconfigjson", "bootstrap.kubernetes.io/token"} {
		if CredentialSecretAllowed(typ) {
			t.Errorf("%q allowed", typ)
		}
	}
	checkNoPartialGrants(t, in, gw)
}

// TestVerify: what Build produces verifies; a model tampered with (as a ConfigMap anyone may
// edit can be) in any way the security model cares about does not.
func TestVerify(t *testing.T) {
	base := func() *Gateway {
		in := testInput(
			ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants("internal-api"), gen.ReverseGrants("acme-erp"), age(1)),
			ipsecPeer("b", []string{"10.30.0.0/16"}, gen.Grants("metrics"), age(2)),
			ipsecPeer("c", []string{"10.20.5.0/24", "10.40.0.0/16"}, age(3)),
		)
		gw, errs := Build(in)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		return gw
	}
	if err := Verify(base()); err != nil {
		t.Fatalf("a built model: %v", err)
	}
	p := netip.MustParsePrefix
	withUplink := base()
	withUplink.Uplink = &Uplink{Interface: "net1", Address: p("198.51.100.2/24"), Gateway: netip.MustParseAddr("198.51.100.1")}
	if err := Verify(withUplink); err != nil {
		t.Fatalf("a model with an uplink: %v", err)
	}
	tests := []struct {
		name   string
		tamper func(g *Gateway)
		want   string
	}{
		{"an uplink named like a path", func(g *Gateway) {
			g.Uplink = &Uplink{Interface: "../net1", Address: p("198.51.100.2/24"), Gateway: netip.MustParseAddr("198.51.100.1")}
		}, "not an interface name"},
		{"an uplink inside the service CIDR", func(g *Gateway) { g.Uplink = &Uplink{Interface: "net1", Address: p("100.64.3.9/24")} }, "outside the service CIDR"},
		{"an uplink gateway off its subnet", func(g *Gateway) {
			g.Uplink = &Uplink{Interface: "net1", Address: p("198.51.100.2/24"), Gateway: netip.MustParseAddr("192.0.2.1")}
		}, "not another address"},
		{"a peer carrying the whole Internet", func(g *Gateway) { g.Peers[1].SourceCIDRs = append(g.Peers[1].SourceCIDRs, p("0.0.0.0/0")) }, "whole Internet"},
		{"a peer carrying cloud metadata", func(g *Gateway) { g.Peers[1].SourceCIDRs = []netip.Prefix{p("169.254.169.254/32")} }, "link-local"},
		{"a peer carrying the service CIDR", func(g *Gateway) { g.Peers[1].SourceCIDRs = []netip.Prefix{p("100.64.3.0/25")} }, "service CIDR"},
		{"a peer carrying the internal sources", func(g *Gateway) { g.Peers[1].SourceCIDRs = []netip.Prefix{p("10.244.1.0/24")} }, "internal source"},
		{"overlapping tunnels", func(g *Gateway) { g.Peers[2].SourceCIDRs = []netip.Prefix{p("10.20.5.0/24")} }, "tunnels overlap"},
		{"a dark peer holding grants", func(g *Gateway) { g.Peers[2].Exposures = []string{"metrics"} }, "holds grants"},
		{"a grant to a dark peer", func(g *Gateway) { g.Exposures[0].GrantedTo = append(g.Exposures[0].GrantedTo, "c") }, "not an authorized peer"},
		{"a target on loopback", func(g *Gateway) { g.Exposures[0].Target = netip.MustParseAddr("127.0.0.1") }, "not one the cluster may offer"},
		{"a target on cloud metadata", func(g *Gateway) { g.Exposures[0].Target = netip.MustParseAddr("169.254.169.254") }, "not one the cluster may offer"},
		{"a virtual IP outside the service CIDR", func(g *Gateway) { g.Exposures[0].VirtualIP = netip.MustParseAddr("10.1.1.1") }, "not a host address"},
		{"two exposures on one virtual IP", func(g *Gateway) { g.Exposures[1].VirtualIP = g.Exposures[0].VirtualIP }, "also that of"},
		{"a reverse exposure outside its grantee", func(g *Gateway) { g.ReverseExposures[0].Target = netip.MustParseAddr("10.30.0.5") }, "outside its grantee"},
		{"a shared remote ID", func(g *Gateway) { g.Peers[1].IPsec.RemoteID = "A.example.com" }, "same remote ID"},
		{"a wildcard remote ID", func(g *Gateway) { g.Peers[1].IPsec.RemoteID = "*.example.com" }, "does not name one identity"},
		{"a service CIDR outside CGNAT", func(g *Gateway) { g.ServiceCIDR = p("10.0.0.0/24") }, "service CIDR"},
		{"an authorized peer with withheld subnets", func(g *Gateway) { g.Peers[0].WithheldCIDRs = []netip.Prefix{p("10.99.0.0/16")} }, "withheld"},
		{"a default route", func(g *Gateway) {
			g.InternalSourceCIDRs = append(g.InternalSourceCIDRs, p("0.0.0.0/0"))
			g.Routes = []Route{{CIDR: p("0.0.0.0/0"), Via: netip.MustParseAddr("198.51.100.202"), Link: "x"}}
		}, "is not an IPv4 network"},
		{"a route that is no internal source", func(g *Gateway) {
			g.Routes = []Route{{CIDR: p("10.50.0.0/16"), Via: netip.MustParseAddr("198.51.100.202"), Link: "x"}}
		}, "not an internal source"},
		{"a route over the service CIDR", func(g *Gateway) {
			g.InternalSourceCIDRs = append(g.InternalSourceCIDRs, p("100.64.0.0/16"))
			g.Routes = []Route{{CIDR: p("100.64.0.0/16"), Via: netip.MustParseAddr("198.51.100.202"), Link: "x"}}
		}, "service CIDR"},
		{"a route via its own range", func(g *Gateway) {
			g.InternalSourceCIDRs = append(g.InternalSourceCIDRs, p("10.50.0.0/16"))
			g.Routes = []Route{{CIDR: p("10.50.0.0/16"), Via: netip.MustParseAddr("10.50.0.1"), Link: "x"}}
		}, "next hop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := base()
			tt.tamper(g)
			err := Verify(g)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Verify: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// olderOverlaps finds exactly the pairs the plain pairwise comparison finds.
func TestOlderOverlapsMatchesPairwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 3000; iter++ {
		n := 1 + rng.IntN(7)
		subnets := make([][]netip.Prefix, n)
		for i := range subnets {
			for range 1 + rng.IntN(3) {
				a := netip.AddrFrom4([4]byte{10, byte(rng.IntN(2)), byte(rng.IntN(4)), byte(rng.IntN(4) * 64)})
				subnets[i] = append(subnets[i], netip.PrefixFrom(a, 8+rng.IntN(19)).Masked())
			}
			subnets[i] = sortPrefixes(subnets[i])
		}
		got := olderOverlaps(subnets)
		for j := range subnets {
			for i := 0; i < j; i++ {
				var want [][2]int
				for yk, y := range subnets[j] {
					for ok, o := range subnets[i] {
						if y.Overlaps(o) {
							want = append(want, [2]int{yk, ok})
						}
					}
				}
				have := slices.Clone(got[j][i])
				slices.SortFunc(have, func(a, b [2]int) int {
					if a[0] != b[0] {
						return a[0] - b[0]
					}
					return a[1] - b[1]
				})
				if !slices.Equal(have, want) {
					t.Fatalf("iteration %d: owners %d and %d (%v, %v): got %v, want %v", iter, j, i, subnets[j], subnets[i], have, want)
				}
			}
			for i := range got[j] {
				if i >= j {
					t.Fatalf("iteration %d: owner %d has pairs with a younger owner %d", iter, j, i)
				}
			}
		}
	}
}
