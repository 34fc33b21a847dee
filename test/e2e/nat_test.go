package e2e

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// A client site behind a NAT (a consumer line, a cloud's NAT gateway): its device has a
// private address and the NAT translates it to the site's public address and its ports to
// others. The site's unchanged configuration gets its tunnel — IPsec detects the NAT and moves
// IKE and ESP into UDP 4500, WireGuard just works — and when the NAT's mapping changes (its
// source ports jump to another range, its connection tracking flushed, as after a NAT's
// restart) the gateway follows the site's new port at the site's next packet: its DPD (IPsec,
// every second) or keepalive (WireGuard, every second). A UDP stream from the site's LAN
// through the exposure (every 100 ms) measures the outage, printed; it must resume and stay
// under natRemapBound.
func TestSiteBehindNAT(t *testing.T) {
	t.Run("ipsec", func(t *testing.T) { testSiteBehindNAT(t, vpnv1.ProtocolIPsec) })
	t.Run("wireguard", func(t *testing.T) { testSiteBehindNAT(t, vpnv1.ProtocolWireGuard) })
}

// natRemapBound is the outage a NAT's new mapping may cost: the site's DPD or keepalive
// interval (1 s) and the gateway's update, with room for a loaded machine.
const natRemapBound = 5 * time.Second

// The NAT's source ports before and after the remapping.
const (
	natPortsBefore = 40000
	natPortsAfter  = 40100
)

func testSiteBehindNAT(t *testing.T, proto vpnv1.Protocol) {
	ctx := context.Background()
	l := newLab(t, proto, uniqueNamespace("e2e-nat-"+string(proto)[:1]), "bnat")
	agent := l.startAgent()
	s, nat := l.newSiteBehindNAT("site-a", natPortsBefore)
	if proto == vpnv1.ProtocolIPsec {
		// a site whose public address is known: the VPNPeer names it
		l.createPeer(s, "web")
	} else {
		// a site behind a NAT has no endpoint the gateway could know in advance: a roaming
		// peer, found by its handshakes
		if err := env.Client.Create(ctx, gen.VPNPeer(l.k8sNS, s.name, gen.Grants("web"),
			gen.WireGuardPeer(s.key.PublicKey().String()), gen.RemoteSubnets(s.subnet.String()))); err != nil {
			t.Fatal(err)
		}
	}
	l.waitAgentReady(agent, 30*time.Second)
	if proto == vpnv1.ProtocolIPsec {
		waitGatewayConnection(t, l, s.name)
	}
	l.configureDevice(s)
	l.waitThroughWeb(s, agent)
	before := waitSiteSeenFrom(t, l, s, natPortsBefore)
	if proto == vpnv1.ProtocolIPsec {
		if sas := l.tunnelSelectors(); !regexp.MustCompile(`TUNNEL-in-UDP`).MatchString(sas) {
			t.Fatalf("the gateway's CHILD_SA is not ESP in UDP behind the NAT:\n%s", sas)
		}
	}
	t.Logf("%s: the gateway sees site-a at %s (its device at %s)", proto, before, s.deviceAddr())

	stream := startUDPStream(t, s.ns.Name, s.addr, l.web(53), 100*time.Millisecond)
	waitFor(t, "the stream flowing", 10*time.Second, func() error {
		if n := stream.answeredCount(); n < 20 {
			return fmt.Errorf("%d answers", n)
		}
		return nil
	})
	remapNAT(t, nat, s.ext, natPortsAfter)
	remapped := time.Now()
	after := waitSiteSeenFrom(t, l, s, natPortsAfter)
	followed := time.Since(remapped)
	answered := stream.answeredCount()
	waitFor(t, "two more seconds of stream", 30*time.Second, func() error {
		if stream.answeredCount() < answered+20 {
			return fmt.Errorf("%d answers since the gateway followed", stream.answeredCount()-answered)
		}
		return nil
	})
	r := stream.finish(2 * time.Second)
	t.Logf("%s site behind a NAT, its mapping changed (%s → %s): the gateway followed within %s; longest outage %s (bound %s)",
		proto, before, after, followed.Round(time.Millisecond), r.Outage.Round(time.Millisecond), natRemapBound)
	t.Logf("site-a's stream: %s", r)
	if r.Outage > natRemapBound {
		t.Errorf("longest outage %s after the NAT's remapping, bound %s", r.Outage.Round(time.Millisecond), natRemapBound)
	}
}

// waitSiteSeenFrom waits until the gateway has the site at its public address and a port of
// the NAT's range from..from+99 (IPsec: the IKE SA's remote endpoint; WireGuard: the peer's
// endpoint) and returns it.
func waitSiteSeenFrom(t *testing.T, l *lab, s *labSite, from int) string {
	t.Helper()
	var seen string
	waitFor(t, fmt.Sprintf("the gateway sees %s from %s:%d-%d", s.name, s.ext, from, from+99), 30*time.Second, func() error {
		var err error
		if seen, err = siteEndpoint(l, s); err != nil {
			return err
		}
		host, p, err := net.SplitHostPort(seen)
		port, perr := strconv.Atoi(p)
		if err != nil || perr != nil || host != s.ext.String() || port < from || port > from+99 {
			return fmt.Errorf("seen at %q", seen)
		}
		return nil
	})
	return seen
}

// siteEndpoint is where the gateway sees the site: "address:port".
func siteEndpoint(l *lab, s *labSite) (string, error) {
	if l.proto == vpnv1.ProtocolIPsec {
		sas, err := l.gwCharon.Swanctl("--list-sas")
		if err != nil {
			return "", err
		}
		// remote 'site-a.example.com' @ 198.51.100.2[40001]
		m := regexp.MustCompile(`remote '` + regexp.QuoteMeta(s.name) + `\.example\.com' @ ([0-9.]+)\[([0-9]+)\]`).FindStringSubmatch(sas)
		if m == nil {
			return "", fmt.Errorf("no IKE SA of %s:\n%s", s.name, sas)
		}
		return m[1] + ":" + m[2], nil
	}
	// the userspace device's UAPI socket is machine-wide (see tunnelSelectors)
	wc, err := wgctrl.New()
	if err != nil {
		return "", err
	}
	defer wc.Close()
	dev, err := wc.Device(l.wgDevice())
	if err != nil {
		return "", err
	}
	for _, p := range dev.Peers {
		if p.PublicKey == s.key.PublicKey() && p.Endpoint != nil {
			return p.Endpoint.String(), nil
		}
	}
	return "", fmt.Errorf("the gateway's device has no endpoint for %s", s.name)
}
