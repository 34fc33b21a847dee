package model

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func linkInput() LinkInput {
	return LinkInput{
		Config: Config{
			PoolCIDR:            DefaultPoolCIDR,
			ClusterPodCIDRs:     []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
			ClusterServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")},
			NodeCIDRs:           []netip.Prefix{netip.MustParsePrefix("192.0.2.0/28")},
		},
		ServiceCIDRs: []GatewayCIDR{{Gateway: "lab-acme/gw", CIDR: netip.MustParsePrefix("100.64.3.0/24")}},
		PeerSubnets: []PeerSubnet{
			{Peer: "lab-acme/hq", Subnet: netip.MustParsePrefix("10.30.1.0/24"), Created: t0},
		},
	}
}

func TestDecideLinks(t *testing.T) {
	later := t0.Add(time.Hour)
	cases := []struct {
		name        string
		link        LinkSpec
		ready       bool
		reason, msg string
	}{
		{"ready", LinkSpec{Name: "svc", CIDRs: []string{"203.0.113.224/27", "10.50.0.0/16"}, Via: "198.51.100.202", Created: later},
			true, ReasonLinkReady, "gateways route 10.50.0.0/16, 203.0.113.224/27 via 198.51.100.202 and admit it as an internal source"},
		{"older peer", LinkSpec{Name: "svc", CIDRs: []string{"10.30.0.0/16"}, Via: "198.51.100.202", Created: later},
			false, ReasonLinkOverlapsPeerSubnet, "cidr 10.30.0.0/16 overlaps peer lab-acme/hq subnet 10.30.1.0/24"},
		{"same age peer", LinkSpec{Name: "svc", CIDRs: []string{"10.30.0.0/16"}, Via: "198.51.100.202", Created: t0},
			false, ReasonLinkOverlapsPeerSubnet, "cidr 10.30.0.0/16 overlaps peer lab-acme/hq subnet 10.30.1.0/24"},
		{"younger peer keeps the link", LinkSpec{Name: "svc", CIDRs: []string{"10.30.0.0/16"}, Via: "198.51.100.202", Created: t0.Add(-time.Minute)},
			true, ReasonLinkReady, ""},
		{"service CIDR", LinkSpec{Name: "svc", CIDRs: []string{"100.64.0.0/16"}, Via: "198.51.100.202", Created: later},
			false, ReasonLinkOverlapsServiceCIDR, "cidr 100.64.0.0/16 overlaps gateway lab-acme/gw service CIDR 100.64.3.0/24"},
		{"pool", LinkSpec{Name: "svc", CIDRs: []string{"100.64.200.0/24"}, Via: "198.51.100.202", Created: later},
			false, ReasonLinkOverlapsServiceCIDR, "cidr 100.64.200.0/24 overlaps the service CIDR pool 100.64.0.0/16"},
		{"cluster service CIDR", LinkSpec{Name: "svc", CIDRs: []string{"10.96.0.0/12"}, Via: "198.51.100.202", Created: later},
			false, ReasonLinkOverlapsClusterRange, "cidr 10.96.0.0/12 overlaps the cluster's service CIDR 10.96.0.0/16"},
		{"node network", LinkSpec{Name: "svc", CIDRs: []string{"192.0.2.0/24"}, Via: "198.51.100.202", Created: later},
			false, ReasonLinkOverlapsClusterRange, "cidr 192.0.2.0/24 overlaps the node network 192.0.2.0/28"},
		{"via inside", LinkSpec{Name: "svc", CIDRs: []string{"198.51.100.0/24"}, Via: "198.51.100.202", Created: later},
			false, ReasonLinkInvalid, "via 198.51.100.202 lies inside the link's own cidr 198.51.100.0/24: the next hop must be on the fabric"},
		{"bad cidr", LinkSpec{Name: "svc", CIDRs: []string{"10.0.0.1/8"}, Via: "198.51.100.202", Created: later},
			false, ReasonLinkInvalid, `cidr "10.0.0.1/8" is not an IPv4 network address in CIDR notation`},
		{"bad via", LinkSpec{Name: "svc", CIDRs: []string{"10.0.0.0/8"}, Via: "224.0.0.1", Created: later},
			false, ReasonLinkInvalid, `via "224.0.0.1" is not a unicast IPv4 address`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := linkInput()
			in.Links = []LinkSpec{c.link}
			d := DecideLinks(in)["svc"]
			if d.Ready != c.ready || d.Reason != c.reason || (c.msg != "" && d.Message != c.msg) {
				t.Fatalf("got ready=%v %s %q, want ready=%v %s %q", d.Ready, d.Reason, d.Message, c.ready, c.reason, c.msg)
			}
			if d.Ready != (d.Link.Name == "svc") {
				t.Errorf("link %+v with ready=%v", d.Link, d.Ready)
			}
		})
	}
}

func TestDecideLinksOlderLinkWins(t *testing.T) {
	in := linkInput()
	in.Links = []LinkSpec{
		{Name: "young", CIDRs: []string{"10.50.1.0/24"}, Via: "198.51.100.6", Created: t0.Add(2 * time.Hour)},
		{Name: "old", CIDRs: []string{"10.50.0.0/16"}, Via: "198.51.100.2", Created: t0.Add(time.Hour)},
		{Name: "refused", CIDRs: []string{"10.30.0.0/16"}, Via: "198.51.100.2", Created: t0},
		// overlaps "refused" only, which is not ready: not a conflict
		{Name: "after-refused", CIDRs: []string{"10.30.128.0/17"}, Via: "198.51.100.2", Created: t0.Add(-time.Hour)},
	}
	in.PeerSubnets = append(in.PeerSubnets, PeerSubnet{Peer: "lab-acme/x", Subnet: netip.MustParsePrefix("10.30.0.0/24"), Created: t0.Add(-2 * time.Hour)})
	got := DecideLinks(in)
	if d := got["old"]; !d.Ready {
		t.Errorf("old: %+v", d)
	}
	if d := got["young"]; d.Ready || d.Reason != ReasonLinkOverlapsLink || d.Message != "cidr 10.50.1.0/24 overlaps ClusterLink old cidr 10.50.0.0/16" {
		t.Errorf("young: %+v", d)
	}
	if d := got["refused"]; d.Ready {
		t.Errorf("refused: %+v", d)
	}
	if d := got["after-refused"]; !d.Ready {
		t.Errorf("after-refused: %+v", d)
	}
	// Deterministic: the order given does not matter.
	slices.Reverse(in.Links)
	if again := DecideLinks(in); !reflect.DeepEqual(again, got) {
		t.Errorf("order changed the decision:\n%+v\n%+v", again, got)
	}
}

func TestBuildWithLinks(t *testing.T) {
	in := testInput(
		ipsecPeer("a", []string{"10.20.0.0/16"}, age(1)),
		ipsecPeer("b", []string{"10.40.0.0/16", "10.50.7.0/24"}, age(2)),
	)
	in.Peers[0].Spec.Authorization = nil
	in.Peers[1].Spec.Authorization = nil
	in.Config.AllowedTargetCIDRs = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}
	link := Link{Name: "svc", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.50.0.0/16")}, Via: netip.MustParseAddr("198.51.100.202")}
	in.Links = []Link{link}
	// An exposure targeting the service cluster: allowed though outside AllowedTargetCIDRs.
	in.Gateway.Spec.Exposures[0].Target.Address = "10.50.0.9"
	in.ReverseClients = []netip.Addr{netip.MustParseAddr("10.244.1.5")}
	gw, errs := Build(in)
	if errs != nil {
		t.Fatalf("Build: %v", errs)
	}
	if err := Verify(gw); err != nil {
		t.Errorf("the built model with a link does not verify: %v", err)
	}
	wantRoutes := []Route{{CIDR: netip.MustParsePrefix("10.50.0.0/16"), Via: netip.MustParseAddr("198.51.100.202"), Link: "svc"}}
	if !reflect.DeepEqual(gw.Routes, wantRoutes) {
		t.Errorf("routes %+v", gw.Routes)
	}
	wantSources := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.50.0.0/16")}
	if !reflect.DeepEqual(gw.InternalSourceCIDRs, wantSources) {
		t.Errorf("internal sources %v", gw.InternalSourceCIDRs)
	}
	if gw.Exposures[0].Target != netip.MustParseAddr("10.50.0.9") {
		t.Errorf("exposure target %s", gw.Exposures[0].Target)
	}
	// b's subnet inside the link is withheld, naming the link; its other subnet is carried.
	b := gw.Peers[1]
	if !reflect.DeepEqual(b.SourceCIDRs, []netip.Prefix{netip.MustParsePrefix("10.40.0.0/16")}) ||
		!reflect.DeepEqual(b.WithheldCIDRs, []netip.Prefix{netip.MustParsePrefix("10.50.7.0/24")}) {
		t.Errorf("peer b carries %v, withheld %v", b.SourceCIDRs, b.WithheldCIDRs)
	}

	// Without the link: no routes, the flag's sources only, and the target is refused.
	in.Links = nil
	if _, errs := Build(in); len(errs) != 1 || errs[0].Reason != ReasonTargetNotAllowed {
		t.Errorf("without the link: %v", errs)
	}
}

func TestServiceCIDRRefusal(t *testing.T) {
	c := Config{PoolCIDR: DefaultPoolCIDR,
		ClusterPodCIDRs:     []netip.Prefix{netip.MustParsePrefix("100.96.0.0/24")},
		ClusterServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("100.97.0.0/16")},
		NodeCIDRs:           []netip.Prefix{netip.MustParsePrefix("100.98.0.0/24")},
		InternalSourceCIDRs: []netip.Prefix{netip.MustParsePrefix("100.99.0.0/24")}}
	for _, tt := range []struct{ cidr, want string }{
		{"100.96.0.0/24", "pod CIDR 100.96.0.0/24"},
		{"100.96.0.0/16", "pod CIDR 100.96.0.0/24"},
		{"100.97.3.0/24", "Service CIDR 100.97.0.0/16"},
		{"100.98.0.128/25", "node network 100.98.0.0/24"},
		{"100.99.0.0/24", "internal source range 100.99.0.0/24"},
		{"100.64.7.0/24", ""},
	} {
		msg, refused := ServiceCIDRRefusal(netip.MustParsePrefix(tt.cidr), c)
		if refused != (tt.want != "") || !strings.Contains(msg, tt.want) {
			t.Errorf("%s: %q, %v; want %q", tt.cidr, msg, refused, tt.want)
		}
	}
}
