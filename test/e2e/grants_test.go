package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	rwg "github.com/bnerd/bnerd-vpn-operator/internal/render/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/wgtest"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Two peers with different grants on one gateway, with real packets: the granted peer reaches
// the exposure over TCP and UDP; the other's packets are dropped and its drop counter rises;
// the reverse exposure into the second peer works from the gateway's tenant (a pod of its
// namespace, inside internalSourceCIDRs) and from nowhere else; and no secret shows up anywhere an engineer or a scraper can look.
func TestTwoPeersDifferentGrants(t *testing.T) {
	ctx := context.Background()
	run := netns.NewRun(t, "bgr")
	siteA, siteB, gw, lan := run.NS("sitea"), run.NS("siteb"), run.NS("gw"), run.NS("lan")
	netns.Veth(siteA, "ext0", gw, "exta")
	netns.Veth(siteB, "ext0", gw, "extb")
	netns.Veth(gw, "eth0", lan, "eth0")
	siteA.MustRun("ip", "addr", "add", "198.51.100.2/30", "dev", "ext0")
	gw.MustRun("ip", "addr", "add", "198.51.100.1/30", "dev", "exta")
	siteB.MustRun("ip", "addr", "add", "198.51.100.6/30", "dev", "ext0")
	gw.MustRun("ip", "addr", "add", "198.51.100.5/30", "dev", "extb")
	// The cluster side: inside internalSourceCIDRs (198.51.100.128/25), plus an outsider address.
	gw.MustRun("ip", "addr", "add", "198.51.100.129/25", "dev", "eth0")
	lan.MustRun("ip", "addr", "add", "198.51.100.130/25", "dev", "eth0")
	lan.MustRun("ip", "addr", "add", "198.51.100.131/25", "dev", "eth0") // another tenant's pod
	lan.MustRun("ip", "addr", "add", "192.0.2.10/24", "dev", "eth0")
	gw.Sysctl("net.ipv4.ip_forward", "1")
	lan.Start("socat", "TCP-LISTEN:8080,reuseaddr,fork", "SYSTEM:echo web-ok")
	lan.Start("socat", "UDP-RECVFROM:5353,fork", "SYSTEM:echo dns-ok")
	siteB.MustRun("ip", "addr", "add", "203.0.113.20/32", "dev", "lo")
	siteB.Start("socat", "TCP-LISTEN:9000,bind=203.0.113.20,reuseaddr,fork", "SYSTEM:echo erp-ok")

	ns := newNamespace(t, "e2e-grants")
	gwKey, keyA, keyB := wgtest.NewKey(t), wgtest.NewKey(t), wgtest.NewKey(t)
	secrets := map[string][]byte{"gw": []byte(gwKey.String())}
	objs := []client.Object{
		gen.WireGuardKeySecret(ns, "gw-key", string(secrets["gw"])),
		gen.VPNGateway(ns, "gw", gen.HostNetwork("node-1", "198.51.100.1"),
			gen.Exposure("web", "198.51.100.130",
				vpnv1.PortSpec{Port: 80, TargetPort: 8080}, vpnv1.PortSpec{Port: 53, TargetPort: 5353, Protocol: vpnv1.PortProtocolUDP}),
			gen.ReverseExposure("erp", "203.0.113.20", gen.Port(9000)),
			gen.WireGuardListenPort(51820), gen.WireGuardPrivateKey("gw-key", "privateKey")),
		gen.VPNPeer(ns, "site-a", gen.Grants("web"), gen.WireGuardPeer(keyA.PublicKey().String()), gen.RemoteSubnets("203.0.113.0/28")),
		gen.VPNPeer(ns, "site-b", gen.ReverseGrants("erp"), gen.WireGuardPeer(keyB.PublicKey().String()), gen.RemoteSubnets("203.0.113.16/28")),
	}
	// the gateway's tenant: a pod at 198.51.100.130 (198.51.100.131 is inside internalSourceCIDRs
	// too, but no pod of this namespace)
	tenantPod(t, ns, "lan-client", "198.51.100.130")
	gateway := createRendered(t, ns, objs, func(gw *vpnv1.VPNGateway) error {
		if gw.Status.AuthorizedPeers != 2 {
			return fmt.Errorf("status %+v", gw.Status)
		}
		return nil
	})
	serviceCIDR := netip.MustParsePrefix(gateway.Status.ServiceCIDR)
	vip := gateway.Status.Exposures[0].VirtualIP
	agentProc := gatewayAgent(t, gw, ns, "gw", "--wireguard-mode", "userspace")

	site := func(n *netns.NS, key wgtypes.Key, addr, gwAddr string) *wgtest.Node {
		dev := wgtest.Start(t, n, wgtest.Options{InterfaceName: wgtest.UniqueInterfaceName("s"), Mode: "userspace"})
		ref := model.SecretKeyRef{Name: "site", Key: "privateKey"}
		if err := dev.Apply(&rwg.Config{
			Interface: rwg.Interface{ListenPort: 51821, Address: netip.MustParsePrefix(addr), MTU: 1420, PrivateKey: ref},
			Peers: []rwg.Peer{{Name: "gateway", PublicKey: gwKey.PublicKey().String(), AllowedIPs: []netip.Prefix{serviceCIDR},
				Endpoint: gwAddr + ":51820", PersistentKeepalive: 1}},
		}, wgtest.Secrets{ref: []byte(key.String())}); err != nil {
			t.Fatalf("site device: %v\n%s", err, dev.Log())
		}
		return dev
	}
	site(siteA, keyA, "203.0.113.1/28", "198.51.100.1")
	site(siteB, keyB, "203.0.113.17/28", "198.51.100.5")

	request := func(n *netns.NS, addr string) (string, error) {
		out, err := n.Run("socat", "-T", "2", "-", addr)
		return strings.TrimSpace(out), err
	}
	// Granted: site-a reaches the exposure over TCP and UDP.
	waitFor(t, "site-a TCP through the exposure", 30*time.Second, func() error {
		if out, err := request(siteA, fmt.Sprintf("TCP:%s:80,connect-timeout=1", vip)); err != nil || out != "web-ok" {
			return fmt.Errorf("%v %q (agent: %s)", err, out, tail(agentProc.Output()))
		}
		return nil
	})
	waitFor(t, "site-a UDP through the exposure", 10*time.Second, func() error {
		if out, err := siteA.RunInput("ping\n", "socat", "-T", "1", "-", fmt.Sprintf("UDP:%s:53", vip)); err != nil || !strings.Contains(out, "dns-ok") {
			return fmt.Errorf("%v %q", err, out)
		}
		return nil
	})
	// Not granted: site-b's connection fails and its own drop counter rises.
	waitFor(t, "site-b tunnel up", 30*time.Second, func() error { return connected(ctx, ns, "site-b") })
	before := dropCounter(t, gw, "site-b")
	if out, err := request(siteB, fmt.Sprintf("TCP:%s:80,connect-timeout=1", vip)); err == nil {
		t.Fatalf("site-b reached the exposure it was not granted: %q", out)
	}
	waitFor(t, "site-b's drop counter rises", 10*time.Second, func() error {
		if after := dropCounter(t, gw, "site-b"); after <= before {
			return fmt.Errorf("drops %v -> %v", before, after)
		}
		return nil
	})
	// The reverse exposure into site-b: from the cluster's internal sources only.
	port := "20000" // the first reverse exposure port (model.ReverseGatewayPortBase)
	waitFor(t, "reverse exposure from an internal source", 10*time.Second, func() error {
		out, err := request(lan, "TCP:198.51.100.129:"+port+",bind=198.51.100.130,connect-timeout=1")
		if err != nil || out != "erp-ok" {
			return fmt.Errorf("%v %q", err, out)
		}
		return nil
	})
	if out, err := request(lan, "TCP:198.51.100.129:"+port+",bind=192.0.2.10,connect-timeout=1"); err == nil {
		t.Fatalf("the reverse exposure answered a source outside internalSourceCIDRs: %q", out)
	}
	if out, err := request(lan, "TCP:198.51.100.129:"+port+",bind=198.51.100.131,connect-timeout=1"); err == nil {
		t.Fatalf("the reverse exposure answered another tenant's pod: %q", out)
	}

	// No secret anywhere: agent log, ConfigMaps, events, VPN objects, metrics.
	var haystack []string
	haystack = append(haystack, agentProc.Output(), metricsText(t, gw))
	for _, l := range []client.ObjectList{&corev1.ConfigMapList{}, &eventsv1.EventList{}, &vpnv1.VPNGatewayList{}, &vpnv1.VPNPeerList{}} {
		if err := env.Client.List(ctx, l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		raw, _ := yaml.Marshal(l)
		haystack = append(haystack, string(raw))
	}
	keys := map[string]wgtypes.Key{"gateway": gwKey, "site-a": keyA, "site-b": keyB}
	for i, h := range haystack {
		if found := wgtest.FindKeys(h, keys); len(found) > 0 {
			t.Errorf("haystack %d contains private keys of %v", i, found)
		}
	}
}

// connected reports whether the agent has marked the peer Connected.
func connected(ctx context.Context, ns, peer string) error {
	p := &vpnv1.VPNPeer{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: peer}, p); err != nil {
		return err
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, vpnv1.ConditionConnected); c == nil || c.Status != metav1.ConditionTrue {
		return fmt.Errorf("peer %s not connected: %+v", peer, p.Status.Conditions)
	}
	return nil
}

// metricsText scrapes the agent's /metrics inside the gateway namespace.
func metricsText(t *testing.T, gw *netns.NS) string {
	t.Helper()
	body, err := gw.RunInput("GET /metrics HTTP/1.0\r\n\r\n", "socat", "-T", "2", "-", "TCP:127.0.0.1:9090")
	if err != nil {
		t.Fatalf("scraping metrics: %v", err)
	}
	return body
}

var dropLine = regexp.MustCompile(`bnerd_vpn_peer_authorization_drops_total\{direction="in",gateway="gw",namespace="[^"]*",peer="([^"]+)"\} ([0-9.e+]+)`)

// dropCounter is the peer's inbound authorization drops from the agent's metrics.
func dropCounter(t *testing.T, gw *netns.NS, peer string) float64 {
	t.Helper()
	for _, m := range dropLine.FindAllStringSubmatch(metricsText(t, gw), -1) {
		if m[1] == peer {
			v, _ := strconv.ParseFloat(m[2], 64)
			return v
		}
	}
	t.Fatalf("no drop counter for %s in the agent's metrics", peer)
	return 0
}
