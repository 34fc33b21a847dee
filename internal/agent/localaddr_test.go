package agent

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// In a real namespace: the gateway's address goes on lo labelled; a later gateway's agent (a
// node holds one host-network gateway) removes the earlier one's, and leaves others alone.
func TestLocalAddressReplacesStaleGatewayAddresses(t *testing.T) {
	netns.Skip(t, "ip")
	ns := netns.NewRun(t, "bvlo").NS("lo")
	ns.MustRun("ip", "link", "set", "lo", "up")
	ns.MustRun("ip", "addr", "add", "100.64.9.1/32", "dev", "lo") // not ours
	h := ns.Netlink()
	gw := func(proto model.Protocol, cidr string) *model.Gateway {
		p := netip.MustParsePrefix(cidr)
		return &model.Gateway{Protocol: proto, ServiceCIDR: p, LocalAddress: p.Addr().Next()}
	}
	addrs := func() []string {
		lo, err := h.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		list, err := h.AddrList(lo, netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range list {
			out = append(out, a.IPNet.String()+" "+a.Label)
		}
		slices.Sort(out)
		return out
	}
	for _, step := range []struct {
		gw   *model.Gateway
		want []string
	}{
		{gw(model.ProtocolIPsec, "100.64.3.0/24"), []string{"100.64.3.1/24 lo:bnerd-vpn", "100.64.9.1/32 lo", "127.0.0.1/8 lo"}},
		{gw(model.ProtocolIPsec, "100.64.3.0/24"), []string{"100.64.3.1/24 lo:bnerd-vpn", "100.64.9.1/32 lo", "127.0.0.1/8 lo"}},
		{gw(model.ProtocolIPsec, "100.64.4.0/24"), []string{"100.64.4.1/24 lo:bnerd-vpn", "100.64.9.1/32 lo", "127.0.0.1/8 lo"}},
		{gw(model.ProtocolWireGuard, "100.64.5.0/24"), []string{"100.64.9.1/32 lo", "127.0.0.1/8 lo"}},
	} {
		if err := ensureLocalAddress(h, step.gw); err != nil {
			t.Fatal(err)
		}
		if got := addrs(); !slices.Equal(got, step.want) {
			t.Errorf("after a %s gateway with %s: lo has %q, want %q", step.gw.Protocol, step.gw.ServiceCIDR, got, step.want)
		}
	}
}
