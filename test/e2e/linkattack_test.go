package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// The service cluster of TestPeerClaimingAClusterLinkRange: its range behind the node's
// fabric link (the node 192.0.2.1, the next hop 192.0.2.2), a service in it, and another of
// its addresses the hostile site takes as a source.
var (
	attackLinkRange = netip.MustParsePrefix("100.73.0.0/24")
	attackLinkHost  = netip.MustParseAddr("100.73.0.5")
	attackLinkSpoof = netip.MustParseAddr("100.73.0.7")
	attackFabricGW  = netip.MustParseAddr("192.0.2.1")
	attackFabricHop = netip.MustParseAddr("192.0.2.2")
)

const (
	attackServicePort = 9100 // the service in the service cluster (TCP and UDP echo)
	attackReversePort = 9000 // hq's service the service cluster reaches (TCP echo)
)

// TestPeerClaimingAClusterLinkRange, IPsec and WireGuard: a hostile peer, created after a
// ClusterLink is Ready, declares the link's range as its subnet (its tenant also grants it the
// exposure of a service in that cluster), and its device claims the range (its strongSwan
// proposes it; its WireGuard device sends from it). The link stays Ready and
// the peer is dark (SubnetOverlapsClusterRange); its tunnel carries its own subnet only. Then,
// with real packets:
//
//   - it cannot attract the service cluster's traffic: hq's TCP and UDP requests to the
//     service's exposure, the gateway's own connections to the service and a service-cluster
//     workload's connection through the reverse exposure into hq's LAN (whose replies go back
//     to the range) all reach the real service cluster — counted leaving on the fabric, none
//     into the tunnel, none arriving at the hostile site, which has the service's address
//     and an echo on its port ready to answer in its place;
//   - from an address of the range it reaches neither the exposure (TCP, UDP; nothing arrives
//     at the service, not even one way) nor the reverse exposure's gateway port (nothing
//     arrives at hq's target), and from its own subnet its packets are dropped and counted on
//     it.
//
// Without the protection (Authorize's reserved ranges without the ready links, and the agent's
// model.Verify without its internal-source check, which refuses such a model on its own) the
// peer is authorized with the range in its tunnel and the test fails: with IPsec charon routes
// the range into that tunnel and the service cluster's traffic goes to the hostile site; with
// WireGuard the node's route keeps that traffic on the fabric, but the peer's packets from the
// range reach the service.
func TestPeerClaimingAClusterLinkRange(t *testing.T) {
	for _, proto := range []vpnv1.Protocol{vpnv1.ProtocolIPsec, vpnv1.ProtocolWireGuard} {
		t.Run(string(proto), func(t *testing.T) { testPeerClaimingALinkRange(t, proto) })
	}
}

func testPeerClaimingALinkRange(t *testing.T, proto vpnv1.Protocol) {
	ctx := context.Background()
	l := newLab(t, proto, uniqueNamespace("e2e-link-attack-"+string(proto)[:2]), "bla")
	hq, hostile := l.newSite("hq"), l.newSite("hostile")

	// The service cluster on the node's fabric link, with the admin's route to it.
	svcNS, _ := l.namespace("svc")
	svc := &labSite{name: "svc", ns: svcNS, addr: attackLinkHost} // a workload in the service cluster
	netns.VethAddr(l.gw, "fab0", attackFabricGW.String()+"/30", svcNS, "eth0", attackFabricHop.String()+"/30")
	svcNS.MustRun("ip", "addr", "add", attackLinkHost.String()+"/32", "dev", "lo")
	svcNS.MustRun("ip", "route", "add", "default", "via", attackFabricGW.String())
	l.gw.MustRun("ip", "route", "add", attackLinkRange.String(), "via", attackFabricHop.String())
	echoServers(t, svcNS.Name, attackLinkHost, attackServicePort)

	gw := l.addExposures(
		vpnv1.Exposure{Name: "svc", Target: vpnv1.ExposureTarget{Address: attackLinkHost.String(),
			Ports: vpnv1.Ports(vpnv1.PortSpec{Port: attackServicePort}, vpnv1.PortSpec{Port: attackServicePort, Protocol: vpnv1.PortProtocolUDP})}},
		vpnv1.ReverseExposure{Name: "erp", Target: vpnv1.ReverseExposureTarget{Address: hq.addr.String(),
			Ports: vpnv1.Ports(vpnv1.PortSpec{Port: attackReversePort})}})
	var serviceVIP netip.Addr
	for _, e := range gw.Status.Exposures {
		if e.Name == "svc" {
			serviceVIP = netip.MustParseAddr(e.VirtualIP)
		}
	}
	l.createPeerWith(hq, []string{hq.subnet.String()}, &vpnv1.Authorization{Exposures: []string{"svc"}, ReverseExposures: []string{"erp"}})
	link := createReadyLink(t, l.k8sNS+"-svc", attackLinkRange, attackFabricHop.String())
	agent := l.startAgent()
	l.waitAgentReady(agent, 30*time.Second)
	l.configureDevice(hq)
	echoServers(t, hq.ns.Name, hq.addr, attackReversePort) // on the site's address, which its device may hold

	service := netip.AddrPortFrom(serviceVIP, attackServicePort).String()
	// The reverse exposure as the service cluster reaches it: the node's address, the gateway's port.
	reverse := netip.AddrPortFrom(attackFabricGW, model.ReverseGatewayPortBase).String()
	gwSelf := &labSite{name: "gateway", ns: l.gw} // the gateway's (node's) own sockets
	legitimate := func(timeout time.Duration) error {
		if err := hq.tcpRequest(service, timeout); err != nil {
			return fmt.Errorf("hq -> %s (exposure svc) over TCP: %w", service, err)
		}
		if err := hq.request(service, timeout); err != nil {
			return fmt.Errorf("hq -> %s (exposure svc) over UDP: %w", service, err)
		}
		if err := svc.tcpRequest(reverse, timeout); err != nil {
			return fmt.Errorf("service cluster %s -> %s (reverse exposure erp into hq): %w", attackLinkHost, reverse, err)
		}
		if err := gwSelf.tcpRequest(netip.AddrPortFrom(attackLinkHost, attackServicePort).String(), timeout); err != nil {
			return fmt.Errorf("the gateway -> %s: %w", attackLinkHost, err)
		}
		return nil
	}
	waitFor(t, "the service cluster's traffic flows", 60*time.Second, func() error { return legitimate(time.Second) })

	// The hostile site: created a second after the link at least (creation times have
	// one-second resolution; a peer no younger than the link would make the link refuse
	// instead), claiming the range, with the service's address and its port ready to answer.
	waitFor(t, "a second past the link's creation", 3*time.Second, func() error {
		if now := metav1.Now(); !now.After(link.CreationTimestamp.Add(time.Second)) {
			return fmt.Errorf("now %s, link created %s", now, link.CreationTimestamp)
		}
		return nil
	})
	for _, a := range []netip.Addr{attackLinkHost, attackLinkSpoof} {
		hostile.ns.MustRun("ip", "addr", "add", a.String()+"/32", "dev", "lo")
	}
	echoServers(t, hostile.ns.Name, attackLinkHost, attackServicePort)
	attracted := hostile.ns.CountPackets("attracted", "prerouting", "ip daddr "+attackLinkRange.String())
	hostile.claims = []netip.Prefix{attackLinkRange}
	l.createPeerWith(hostile, []string{hostile.subnet.String(), attackLinkRange.String()}, &vpnv1.Authorization{Exposures: []string{"svc"}})
	t.Cleanup(func() { // its claim would outlive the lab (envtest keeps namespaces) and refuse the next link
		_ = env.Client.Delete(context.Background(), &vpnv1.VPNPeer{ObjectMeta: metav1.ObjectMeta{Namespace: l.k8sNS, Name: hostile.name}})
	})
	l.configureDevice(hostile)
	waitFor(t, "the hostile site's tunnel up", 60*time.Second, func() error {
		_, err := peerConnected(l.k8sNS, "hostile")
		return err
	})

	// The link stays Ready; the peer is dark, its tunnel without the range.
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(link), link); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(link.Status.Conditions, "Ready") {
		t.Fatalf("the ClusterLink is no longer Ready: %+v", link.Status.Conditions)
	}
	peer := &vpnv1.VPNPeer{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: l.k8sNS, Name: "hostile"}, peer); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(peer.Status.Conditions, vpnv1.ConditionAuthorized)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != model.ReasonSubnetOverlapsClusterRange || !strings.Contains(c.Message, link.Name) {
		t.Errorf("hostile's Authorized condition %+v, want False/%s naming ClusterLink %s", c, model.ReasonSubnetOverlapsClusterRange, link.Name)
	} else {
		t.Logf("hostile: Authorized=%s/%s: %s", c.Status, c.Reason, c.Message)
	}
	if sel := l.tunnelSelectors(); !strings.Contains(sel, hostile.subnet.String()) || strings.Contains(sel, attackLinkRange.String()) {
		t.Errorf("the gateway's tunnels should carry %s and not %s:\n%s", hostile.subnet, attackLinkRange, sel)
	}

	// (b) Attraction: the service cluster's traffic keeps going to the service cluster.
	toRange := fmt.Sprintf("ip daddr %s oifname ", attackLinkRange)
	intoTunnel := l.gw.CountPackets("range_tunnel", "postrouting", toRange+fmt.Sprintf("%q", l.tunnelInterface()))
	onFabric := l.gw.CountPackets("range_fabric", "postrouting", toRange+`"fab0"`)
	for i := range 5 {
		if err := legitimate(2 * time.Second); err != nil {
			t.Fatalf("round %d with the hostile tunnel up: %v (packets toward %s into the tunnel %d, at the hostile site %d)",
				i, err, attackLinkRange, intoTunnel(), attracted())
		}
	}
	tunnel, fabric, atHostile := intoTunnel(), onFabric(), attracted()
	t.Logf("5 rounds of service-cluster traffic: packets toward %s on the fabric %d, into the tunnel %d, arriving at the hostile site %d",
		attackLinkRange, fabric, tunnel, atHostile)
	if tunnel != 0 || atHostile != 0 {
		t.Errorf("traffic toward the service cluster went into the tunnel (%d packets) or reached the hostile site (%d)", tunnel, atHostile)
	}
	if fabric == 0 {
		t.Error("no packet toward the service cluster counted on the fabric: the probe sees nothing")
	}

	// (a) Posing as the service cluster: from an address of the range, through its tunnel.
	spoofer := &labSite{name: "hostile", ns: hostile.ns, addr: attackLinkSpoof}
	sent := hostile.ns.OutputCounters(attackLinkSpoof.String(), hostile.tunnelInterface(), "ext0")
	atTarget := hq.ns.CountPackets("reverse_target", "prerouting", fmt.Sprintf("tcp dport %d", attackReversePort))
	// Arriving at the service at all: a one-way delivery counts too.
	atService := svcNS.CountPackets("service", "prerouting", fmt.Sprintf("th dport %d", attackServicePort))
	// The reverse exposure's port on the gateway's service address, behind the tunnel.
	gatewayPort := l.gatewayService(model.ReverseGatewayPortBase)
	drops := dropCounter(t, l.gw, "hostile")
	for i := range 5 {
		if err := spoofer.tcpRequest(service, 500*time.Millisecond); err == nil {
			t.Fatalf("attempt %d: %s reached the exposure svc over TCP from %s", i, hostile.name, attackLinkSpoof)
		}
		if err := spoofer.request(service, 500*time.Millisecond); err == nil {
			t.Fatalf("attempt %d: %s reached the exposure svc over UDP from %s", i, hostile.name, attackLinkSpoof)
		}
		if err := spoofer.tcpRequest(gatewayPort, 500*time.Millisecond); err == nil {
			t.Fatalf("attempt %d: %s reached the reverse exposure's port %s from %s", i, hostile.name, gatewayPort, attackLinkSpoof)
		}
	}
	if n := atTarget(); n != 0 {
		t.Errorf("%d packets arrived at hq's reverse target while only the hostile site sent", n)
	}
	if n := atService(); n != 0 {
		t.Errorf("%d packets arrived at the service while only the hostile site sent", n)
	}
	// (c) Posing as the service cluster in the clear, from the internet: connections from an
	// address of the range sent to the node's public address and the reverse exposure's gateway
	// port. The gateway shares the node's namespace, where reverse clients arrive on any device
	// but the tunnel's; the strict reverse-path check admits them only on the device the node
	// routes their source through (the fabric). Without it every SYN reached hq's target.
	public := netip.AddrPortFrom(labGatewayAddr, model.ReverseGatewayPortBase).String()
	for i := range 3 {
		if err := spoofer.tcpRequest(public, 500*time.Millisecond); err == nil {
			t.Fatalf("attempt %d: %s reached the reverse exposure at %s in the clear from %s", i, hostile.name, public, attackLinkSpoof)
		}
	}
	if n := atTarget(); n != 0 {
		t.Errorf("%d packets from %s sent in the clear to %s arrived at hq's reverse target", n, attackLinkSpoof, public)
	} else {
		t.Logf("from %s in the clear to the node's %s: %d packets out of ext0, none arrived at hq's target", attackLinkSpoof, public, sent("ext0"))
	}
	for i := range 3 {
		if err := hostile.tcpRequest(service, 500*time.Millisecond); err == nil {
			t.Fatalf("attempt %d: the dark %s reached the exposure svc from its own subnet", i, hostile.name)
		}
	}
	waitFor(t, "the hostile peer's drop counter rises", 10*time.Second, func() error {
		if after := dropCounter(t, l.gw, "hostile"); after <= drops {
			return fmt.Errorf("drops %v -> %v", drops, after)
		}
		return nil
	})
	t.Logf("from %s: %d packets sent into the hostile site's tunnel device, %d in the clear; none delivered. From its own subnet: dropped, counted on the peer (%v -> %v)",
		attackLinkSpoof, sent(hostile.tunnelInterface()), sent("ext0"), drops, dropCounter(t, l.gw, "hostile"))
	if err := legitimate(2 * time.Second); err != nil {
		t.Fatalf("after the attempts: %v", err)
	}
}

// addExposures adds exposures and reverse exposures to the lab's gateway and returns it once
// they are rendered with their addresses.
func (l *lab) addExposures(e vpnv1.Exposure, r vpnv1.ReverseExposure) *vpnv1.VPNGateway {
	l.tb.Helper()
	ctx := context.Background()
	gw := &vpnv1.VPNGateway{}
	key := client.ObjectKey{Namespace: l.k8sNS, Name: "gw"}
	waitFor(l.tb, "the gateway updated", 10*time.Second, func() error { // retried on a conflict
		if err := env.Client.Get(ctx, key, gw); err != nil {
			return err
		}
		gw.Spec.Exposures = append(gw.Spec.Exposures, e)
		gw.Spec.ReverseExposures = append(gw.Spec.ReverseExposures, r)
		return env.Client.Update(ctx, gw)
	})
	waitFor(l.tb, "the exposures rendered", 30*time.Second, func() error {
		if err := env.Client.Get(ctx, key, gw); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(gw.Status.Conditions, vpnv1.ConditionRendered) ||
			len(gw.Status.Exposures) != len(gw.Spec.Exposures) || len(gw.Status.ReverseExposures) != len(gw.Spec.ReverseExposures) {
			return fmt.Errorf("status %+v", gw.Status)
		}
		for _, s := range gw.Status.Exposures {
			if s.VirtualIP == "" {
				return fmt.Errorf("exposure %s without an address", s.Name)
			}
		}
		return nil
	})
	return gw
}
