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
	rwg "github.com/bnerd/bnerd-vpn-operator/internal/render/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/wgtest"
)

// CR → operator → ConfigMap → agent (WireGuard, userspace) → tunnel to a client site → TCP
// through the exposure to a backend → VPNPeer Connected with bytes counted.
func TestWireGuardTunnelToStatus(t *testing.T) {
	ctx := context.Background()
	run := netns.NewRun(t, "bwg")
	site, gw, backend := run.NS("site"), run.NS("gw"), run.NS("backend")
	netns.Veth(site, "ext0", gw, "ext0")
	netns.Veth(gw, "eth0", backend, "eth0")
	site.MustRun("ip", "addr", "add", "198.51.100.2/24", "dev", "ext0")
	gw.MustRun("ip", "addr", "add", "198.51.100.1/24", "dev", "ext0")
	gw.MustRun("ip", "addr", "add", "192.0.2.1/24", "dev", "eth0")
	backend.MustRun("ip", "addr", "add", "192.0.2.10/24", "dev", "eth0")
	gw.Sysctl("net.ipv4.ip_forward", "1")
	echo := backend.Start("socat", "TCP-LISTEN:8080,reuseaddr,fork", "SYSTEM:echo hello-from-backend")
	_ = echo

	ns := newNamespace(t, "e2e-wireguard")
	gwKey, siteKey := wgtest.NewKey(t), wgtest.NewKey(t)
	objs := []client.Object{
		gen.WireGuardKeySecret(ns, "gw-key", gwKey.String()),
		gen.VPNGateway(ns, "gw", gen.HostNetwork("node-1", "198.51.100.1"),
			gen.Exposure("web", "192.0.2.10", vpnv1.PortSpec{Port: 80, TargetPort: 8080}),
			gen.WireGuardListenPort(51820), gen.WireGuardPrivateKey("gw-key", "privateKey")),
		gen.VPNPeer(ns, "site-a", gen.WireGuardPeer(siteKey.PublicKey().String()), gen.RemoteSubnets("203.0.113.0/28")),
	}
	gateway := createRendered(t, ns, objs, nil)
	serviceCIDR := netip.MustParsePrefix(gateway.Status.ServiceCIDR)
	vip := gateway.Status.Exposures[0].VirtualIP

	start := time.Now()
	agentProc := gatewayAgent(t, gw, ns, "gw", "--wireguard-mode", "userspace")

	// The client's device, configured as its owner would from our parameter sheet.
	siteDev := wgtest.Start(t, site, wgtest.Options{InterfaceName: wgtest.UniqueInterfaceName("site"), Mode: "userspace"})
	siteRef := model.SecretKeyRef{Name: "site", Key: "privateKey"}
	if err := siteDev.Apply(&rwg.Config{
		Interface: rwg.Interface{ListenPort: 51821, Address: netip.MustParsePrefix("203.0.113.1/28"), MTU: 1420, PrivateKey: siteRef},
		Peers: []rwg.Peer{{Name: "gateway", PublicKey: gwKey.PublicKey().String(), AllowedIPs: []netip.Prefix{serviceCIDR},
			Endpoint: "198.51.100.1:51820", PersistentKeepalive: 1}},
	}, wgtest.Secrets{siteRef: []byte(siteKey.String())}); err != nil {
		t.Fatalf("client device: %v\n%s", err, siteDev.Log())
	}

	// Traffic through the exposure: the client reaches the backend at the virtual IP.
	waitFor(t, "TCP through the exposure", 30*time.Second, func() error {
		out, err := site.Run("socat", "-T", "2", "-", fmt.Sprintf("TCP:%s:80,connect-timeout=1", vip))
		if err != nil || !strings.Contains(out, "hello-from-backend") {
			return fmt.Errorf("%v: %s (agent: %s)", err, out, tail(agentProc.Output()))
		}
		return nil
	})
	peer := &vpnv1.VPNPeer{}
	waitFor(t, "VPNPeer Connected", 30*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "site-a"}, peer); err != nil {
			return err
		}
		c := meta.FindStatusCondition(peer.Status.Conditions, vpnv1.ConditionConnected)
		if c == nil || c.Status != metav1.ConditionTrue || peer.Status.Tunnel == nil || peer.Status.Tunnel.BytesIn == 0 {
			return fmt.Errorf("status %+v (agent: %s)", peer.Status, tail(agentProc.Output()))
		}
		return nil
	})
	t.Logf("CR to Connected (agent start included): %s", time.Since(start).Round(time.Millisecond))
	if a := meta.FindStatusCondition(peer.Status.Conditions, vpnv1.ConditionAuthorized); a == nil || a.Reason != model.ReasonDefaultAllow {
		t.Errorf("the agent's status write disturbed the operator's Authorized condition: %+v", a)
	}
}

func tail(s string) string {
	if len(s) > 2000 {
		return "..." + s[len(s)-2000:]
	}
	return s
}
