package vmtest_test

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/charontest"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/vmtest"
)

// TestGuestKernelOneChildPerSubnet: a site with three subnets negotiates one CHILD_SA per
// subnet (as FortiGate, PAN-OS and MikroTik do) with a kernel-ESP gateway. Each CHILD_SA gets
// the reqid of its subnet (the kernel sends through the newest SA of a reqid, so one reqid for
// all three would send every subnet's answers through one subnet's SA, which the site drops),
// each subnet's request is answered through its own SA, and the ruleset's binding still drops
// and counts a datagram from an address outside the peer's subnets sent through one of them.
func TestGuestKernelOneChildPerSubnet(t *testing.T) {
	vmtest.SkipUnlessGuest(t)
	charontest.Skip(t, "nft")
	g := newKernelGW(t)
	a := g.addSite("a", 0, []string{"web", "dns"}, nil)
	a.perSubnet = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/30"), netip.MustParsePrefix("203.0.113.4/30"), netip.MustParsePrefix("203.0.113.8/30")}
	var subnets []string
	for _, p := range a.perSubnet {
		subnets = append(subnets, p.String())
		if host := p.Addr().Next(); host != a.addr {
			a.ns.AddLoopback(host.String() + "/32")
		}
	}
	g.in.Peers[0].Spec.IPsec.RemoteSubnets = subnets
	g.publish()
	peer := g.peer("a")
	if len(peer.IPsec.SubnetReqids) != 3 {
		t.Fatalf("the model gives peer a subnet reqids %v for %v", peer.IPsec.SubnetReqids, peer.SourceCIDRs)
	}
	t.Logf("model: peer a reqid %d, its subnets' %v", peer.IPsec.Reqid, peer.IPsec.SubnetReqids)

	g.startCharon()
	g.startAgent(true)
	a.charon = charontest.Start(t, a.ns, a.name, charontest.Config{Plugins: kernelPlugins})
	if err := a.charon.LoadSwanctlConf(siteSwanctlConf(a, g.m.ServiceCIDR)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a CHILD_SA per subnet in the gateway's kernel, each with its subnet's reqid", 60*time.Second, func() error {
		states := g.node.MustRun("ip", "xfrm", "state")
		for i, r := range peer.IPsec.SubnetReqids {
			if n := strings.Count(states, fmt.Sprintf("reqid %d ", r)); n < 2 {
				return fmt.Errorf("subnet %s: %d kernel SAs with reqid %d", peer.SourceCIDRs[i], n, r)
			}
		}
		return nil
	})
	dns := netip.AddrPortFrom(g.vip("dns"), 53).String()
	for _, p := range a.perSubnet {
		src := p.Addr().Next()
		waitUntil(t, "a request from "+src.String()+" answered through its subnet's SA", 20*time.Second, func() error {
			return request(a.ns, "udp", src, dns, time.Second)
		})
	}
	t.Logf("three CHILD_SAs, one per subnet, each carrying its subnet's traffic to %s and back", dns)

	// From an address of the site's that is none of its subnets (203.0.113.13) through the
	// first subnet's SA (the site's reqid siteReqid): no reqid of the gateway carries it, so the
	// ruleset drops and counts it, whichever of the peer's SAs for that subnet the site's kernel
	// picks (the gateway also starts its child for all three subnets, which the site narrows).
	spoof := netip.MustParseAddr("203.0.113.13")
	counted := g.spoofThrough(a.ns, a.ext, spoof, strconv.Itoa(siteReqid), dns)
	if counted < 5 {
		t.Errorf("5 datagrams from %s (none of the peer's subnets) through the first subnet's SA: %s counted %d", spoof, nft.CounterSpoofed, counted)
	}
	t.Logf("from %s through %s's SA: %s +%d", spoof, a.perSubnet[0], nft.CounterSpoofed, counted)
}
