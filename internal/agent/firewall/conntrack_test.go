package firewall

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
)

// After a repair, every TCP/UDP flow with an end in a peer's subnets that the ruleset did not
// mark is cut (the ruleset admits none: a drifted table let it start), and so is every marked
// flow the model does not grant; the node's or pod's other flows are left alone.
func TestUnruledFlows(t *testing.T) {
	m := &model.Gateway{
		Peers: []model.Peer{
			{Name: "granted", SourceCIDRs: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/28")},
				Authorization: model.Decision{Authorized: true}},
			{Name: "dark", SourceCIDRs: []netip.Prefix{netip.MustParsePrefix("203.0.113.16/28")}},
		},
		Exposures: []model.Exposure{{Name: "web", VirtualIP: netip.MustParseAddr("100.64.7.10"), Target: netip.MustParseAddr("198.51.100.130"),
			Ports: []model.Port{{Protocol: "tcp", Port: 80, TargetPort: 8080}}, GrantedTo: []string{"granted"}}},
	}
	match := unruled{keep: revoked(nft.GrantedFlows(m)), peers: []netip.Prefix{
		netip.MustParsePrefix("203.0.113.0/28"), netip.MustParsePrefix("203.0.113.16/28")}}
	flow := func(proto uint8, mark uint32, src, dst string, dport uint16, replySrc, replyDst string) *netlink.ConntrackFlow {
		return &netlink.ConntrackFlow{Mark: mark,
			Forward: netlink.IPTuple{Protocol: proto, SrcIP: net.ParseIP(src), DstIP: net.ParseIP(dst), DstPort: dport},
			Reverse: netlink.IPTuple{Protocol: proto, SrcIP: net.ParseIP(replySrc), DstIP: net.ParseIP(replyDst)}}
	}
	cases := []struct {
		name string
		flow *netlink.ConntrackFlow
		cut  bool
	}{
		{"granted, translated", flow(unix.IPPROTO_TCP, nft.MarkForward, "203.0.113.1", "100.64.7.10", 80, "198.51.100.130", "198.51.100.129"), false},
		{"dark peer, marked by a forged rule", flow(unix.IPPROTO_TCP, nft.MarkForward, "203.0.113.17", "100.64.7.10", 80, "198.51.100.130", "198.51.100.129"), true},
		{"dark peer through a forged DNAT", flow(unix.IPPROTO_TCP, 0, "203.0.113.17", "100.64.7.10", 80, "198.51.100.130", "203.0.113.17"), true},
		{"granted peer to what no exposure offers", flow(unix.IPPROTO_UDP, 0, "203.0.113.1", "100.64.0.1", 443, "100.64.0.1", "203.0.113.1"), true},
		{"peer to the gateway itself", flow(unix.IPPROTO_TCP, 0, "203.0.113.17", "100.64.7.1", 7777, "100.64.7.1", "203.0.113.17"), true},
		{"into a peer's subnet, initiated inside", flow(unix.IPPROTO_TCP, 0, "198.51.100.130", "203.0.113.5", 22, "203.0.113.5", "198.51.100.130"), true},
		{"into a peer's subnet through a forged DNAT", flow(unix.IPPROTO_TCP, 0, "198.51.100.130", "100.64.7.20", 22, "203.0.113.5", "198.51.100.130"), true},
		{"ICMP", flow(unix.IPPROTO_ICMP, 0, "203.0.113.17", "100.64.7.1", 0, "100.64.7.1", "203.0.113.17"), false},
		{"IKE from the peer's public address", flow(unix.IPPROTO_UDP, 0, "198.51.100.2", "198.51.100.1", 500, "198.51.100.1", "198.51.100.2"), false},
		{"the pod's own traffic", flow(unix.IPPROTO_TCP, 0, "198.51.100.129", "192.0.2.50", 6443, "192.0.2.50", "198.51.100.129"), false},
	}
	for _, c := range cases {
		if got := match.MatchConntrackFlow(c.flow); got != c.cut {
			t.Errorf("%s: cut %v, want %v", c.name, got, c.cut)
		}
	}
}
