package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	rwg "github.com/bnerd/bnerd-vpn-operator/internal/render/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/wgtest"
)

// A service cluster behind the node, linked by a ClusterLink, with real packets: the network
// namespace "svc" (range 100.72.0.0/24, host 100.72.0.5) sits on the fabric link
// 198.51.100.200/30 of the gateway's node, which routes the range there (the admin's route).
// A peer reaches a service in it through an exposure; a workload in it reaches a reverse
// exposure into the peer's LAN only while the link is ready (its range is then an internal
// source); the host-network gateway's agent adds no route of its own to the node and leaves
// the admin's.
func TestClusterLinkServiceCluster(t *testing.T) {
	ctx := context.Background()
	run := netns.NewRun(t, "bcl")
	site, gw, svc := run.NS("site"), run.NS("gw"), run.NS("svc")
	netns.VethAddr(site, "ext0", "198.51.100.2/30", gw, "exta", "198.51.100.1/30")
	netns.VethAddr(gw, "fab0", "198.51.100.201/30", svc, "eth0", "198.51.100.202/30")
	svc.MustRun("ip", "addr", "add", "100.72.0.5/32", "dev", "lo")
	svc.MustRun("ip", "route", "add", "default", "via", "198.51.100.201")
	gw.MustRun("ip", "route", "add", "100.72.0.0/24", "via", "198.51.100.202") // the node's (admin's) route
	gw.Sysctl("net.ipv4.ip_forward", "1")
	svc.Start("socat", "TCP-LISTEN:9100,bind=100.72.0.5,reuseaddr,fork", "SYSTEM:echo svc-ok")
	site.MustRun("ip", "addr", "add", "203.0.113.20/32", "dev", "lo")
	site.Start("socat", "TCP-LISTEN:9000,bind=203.0.113.20,reuseaddr,fork", "SYSTEM:echo erp-ok")

	ns := newNamespace(t, "e2e-clusterlink")
	gwKey, siteKey := wgtest.NewKey(t), wgtest.NewKey(t)
	objs := []client.Object{
		gen.WireGuardKeySecret(ns, "gw-key", gwKey.String()),
		gen.VPNGateway(ns, "gw", gen.HostNetwork("node-1", "198.51.100.1"),
			gen.Exposure("svc", "100.72.0.5", gen.Port(9100)), gen.ReverseExposure("erp", "203.0.113.20", gen.Port(9000)),
			gen.WireGuardListenPort(51820), gen.WireGuardPrivateKey("gw-key", "privateKey")),
		gen.VPNPeer(ns, "site", gen.WireGuardPeer(siteKey.PublicKey().String()), gen.RemoteSubnets("203.0.113.16/28")),
	}
	gateway := createRendered(t, ns, objs, func(gw *vpnv1.VPNGateway) error {
		if gw.Status.AuthorizedPeers != 1 || len(gw.Status.Exposures) != 1 {
			return fmt.Errorf("status %+v", gw.Status)
		}
		return nil
	})
	serviceCIDR := netip.MustParsePrefix(gateway.Status.ServiceCIDR)
	vip := gateway.Status.Exposures[0].VirtualIP
	agentProc := gatewayAgent(t, gw, ns, "gw", "--wireguard-mode", "userspace")

	dev := wgtest.Start(t, site, wgtest.Options{InterfaceName: wgtest.UniqueInterfaceName("s"), Mode: "userspace"})
	ref := model.SecretKeyRef{Name: "site", Key: "privateKey"}
	if err := dev.Apply(&rwg.Config{
		Interface: rwg.Interface{ListenPort: 51821, Address: netip.MustParsePrefix("203.0.113.17/28"), MTU: 1420, PrivateKey: ref},
		Peers: []rwg.Peer{{Name: "gateway", PublicKey: gwKey.PublicKey().String(), AllowedIPs: []netip.Prefix{serviceCIDR},
			Endpoint: "198.51.100.1:51820", PersistentKeepalive: 1}},
	}, wgtest.Secrets{ref: []byte(siteKey.String())}); err != nil {
		t.Fatalf("site device: %v\n%s", err, dev.Log())
	}
	request := func(n *netns.NS, addr string) (string, error) {
		out, err := n.Run("socat", "-T", "2", "-", addr)
		return strings.TrimSpace(out), err
	}

	// An exposure targeting a host in the service cluster.
	waitFor(t, "the site reaches the service cluster through the exposure", 30*time.Second, func() error {
		if out, err := request(site, fmt.Sprintf("TCP:%s:9100,bind=203.0.113.20,connect-timeout=1", vip)); err != nil || out != "svc-ok" {
			return fmt.Errorf("%v %q (agent: %s)", err, out, tail(agentProc.Output()))
		}
		return nil
	})
	t.Logf("site 203.0.113.20 -> %s:9100 (exposure svc, target 100.72.0.5 in the service cluster): svc-ok", vip)

	reverse := "TCP:198.51.100.201:20000,bind=100.72.0.5,connect-timeout=1" // the first reverse exposure port
	if out, err := request(svc, reverse); err == nil {
		t.Fatalf("the reverse exposure answered the service cluster before any ClusterLink: %q", out)
	}

	link := createReadyLink(t, ns+"-svc", netip.MustParsePrefix("100.72.0.0/24"), "198.51.100.202")
	waitFor(t, "a workload in the service cluster reaches the reverse exposure", 30*time.Second, func() error {
		if out, err := request(svc, reverse); err != nil || out != "erp-ok" {
			return fmt.Errorf("%v %q", err, out)
		}
		return nil
	})
	t.Logf("service cluster 100.72.0.5 -> 198.51.100.201:20000 (reverse exposure erp into the site): erp-ok")

	routes, err := gw.Run("ip", "-4", "route", "show")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(routes, "100.72.0.0/24 via 198.51.100.202 dev fab0") || strings.Contains(routes, "proto 191") {
		t.Fatalf("the node's routes: want the admin's route to the service cluster and none of the agent's:\n%s", routes)
	}

	if err := env.Client.Delete(ctx, link); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	waitFor(t, "the service cluster refused again once the link is gone", 30*time.Second, func() error {
		if out, err := request(svc, reverse); err == nil {
			return fmt.Errorf("still answered: %q", out)
		}
		return nil
	})
}

// createReadyLink creates the ClusterLink name (range cidr via the next hop via; deleted at
// cleanup) and returns it once it is Ready.
func createReadyLink(t *testing.T, name string, cidr netip.Prefix, via string) *ipsecv1.ClusterLink {
	t.Helper()
	ctx := context.Background()
	link := &ipsecv1.ClusterLink{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: ipsecv1.ClusterLinkSpec{CIDRs: []string{cidr.String()}, Via: via}}
	if err := env.Client.Create(ctx, link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), link) })
	waitFor(t, "the ClusterLink "+name+" Ready", 20*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(link), link); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(link.Status.Conditions, "Ready") {
			return fmt.Errorf("conditions %+v", link.Status.Conditions)
		}
		return nil
	})
	return link
}
