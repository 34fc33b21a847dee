package wireguard_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/availability"
	rwg "github.com/bnerd/bnerd-vpn-operator/internal/render/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/wgtest"
)

// A standby gateway's device, configured behind the fence, has sent nothing a site saw; on
// TakeOver (fence gone) it sends a handshake to every peer with an endpoint at once — here a
// site that cannot initiate (it knows no endpoint of the gateway) and a peer without a
// keepalive, so nothing else would make the gateway speak — and the peers' configuration is
// as before (no keepalive left behind, the pre-shared key kept: traffic passes).
func TestTakeOverHandshakes(t *testing.T) {
	netns.Skip(t, "ping", "nft")
	run := netns.NewRun(t, nsPrefix+"t")
	gw, site := run.NS("gw"), run.NS("site")
	netns.Veth(site, "vsite", gw, "vgw1")
	site.MustRun("ip", "addr", "add", "198.51.100.1/24", "dev", "vsite")
	gw.MustRun("ip", "addr", "add", "198.51.100.2/24", "dev", "vgw1")
	ctx := context.Background()
	fence := &availability.Fence{NFT: gw.Wrapper(t, "nft")}
	if err := fence.Install(ctx, 51820); err != nil {
		t.Fatal(err)
	}

	gwKey, siteKey, psk := wgtest.NewKey(t), wgtest.NewKey(t), wgtest.NewKey(t)
	secrets := wgtest.Secrets{gwKeyRef: []byte(gwKey.String()), siteKeyRef: []byte(siteKey.String()), pskRef: []byte(psk.String())}
	gwNode := wgtest.Start(t, gw, wgtest.Options{InterfaceName: wgtest.UniqueInterfaceName("g")})
	siteNode := wgtest.Start(t, site, wgtest.Options{InterfaceName: wgtest.UniqueInterfaceName("s")})
	peer := rwg.Peer{Name: "site-a", PublicKey: siteKey.PublicKey().String(), AllowedIPs: pfx("203.0.113.0/28"),
		PresharedKey: &pskRef, Endpoint: "198.51.100.1:51820"}
	if err := gwNode.Apply(gatewayConfig(peer), secrets); err != nil {
		t.Fatal(err)
	}
	if err := siteNode.Apply(siteConfig(siteKeyRef, "203.0.113.1/28", rwg.Peer{
		Name: "gateway", PublicKey: gwKey.PublicKey().String(), AllowedIPs: pfx("100.64.7.0/24"), PresharedKey: &pskRef,
	}), secrets); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if s, err := peerState(siteNode, "gateway"); err != nil || !s.LastHandshake.IsZero() {
		t.Fatalf("the site heard the fenced gateway: %+v %v", s, err)
	}

	if err := fence.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Now()
	if err := gwNode.TakeOver(); err != nil {
		t.Fatal(err)
	}
	waitState(t, siteNode, "gateway", 2*time.Second, func(s agent.PeerState) error {
		if s.LastHandshake.IsZero() {
			return fmt.Errorf("no handshake yet (%s)", s.State)
		}
		return nil
	})
	t.Logf("handshake %s after TakeOver (%s)", time.Since(took).Round(time.Millisecond), gwNode.Mode)
	dev, err := gwNode.Device()
	if err == nil {
		for _, p := range dev.Peers {
			if p.PersistentKeepaliveInterval != 0 {
				t.Errorf("peer keeps a keepalive of %s after TakeOver", p.PersistentKeepaliveInterval)
			}
			clear(p.PresharedKey[:])
		}
		clear(dev.PrivateKey[:])
	}
	if err := ping(site, "100.64.7.1"); err != nil {
		t.Fatal(err)
	}
}
