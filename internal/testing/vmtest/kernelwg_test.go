package vmtest_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/vmtest"
)

// TestGuestKernelWireGuardGateway: a host-network WireGuard gateway whose agent runs the kernel
// device (--wireguard-mode kernel), one site with a kernel WireGuard device, one exposure.
func TestGuestKernelWireGuardGateway(t *testing.T) {
	vmtest.SkipUnlessGuest(t)
	netns.Skip(t, "wg", "nft")
	bin := agentBinary(t)
	r := netns.NewRun(t, "vmkw")
	node, lan, site := r.NS("gw"), r.NS("lan"), r.NS("site")
	netns.VethAddr(node, "eth0", "192.0.2.129/25", lan, "eth0", wgBackend.String()+"/25")
	node.Sysctl("net.ipv4.ip_forward", "1")
	startEcho(t, lan, netip.AddrPortFrom(wgBackend, webPort).String())
	siteExt := netip.MustParseAddr("192.0.2.34")
	netns.Veth(node, "ext0", site, "ext0")
	node.MustRun("ip", "addr", "add", wgPublic.String()+"/32", "peer", siteExt.String()+"/32", "dev", "ext0")
	site.MustRun("ip", "addr", "add", siteExt.String()+"/32", "peer", wgPublic.String()+"/32", "dev", "ext0")

	gwKey, siteKey := mustKey(t), mustKey(t)
	dir := t.TempDir()
	cfgDir, secDir := filepath.Join(dir, "config"), filepath.Join(dir, "secrets")
	for _, d := range []string{cfgDir, filepath.Join(secDir, "gw-key")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(secDir, "gw-key", "privateKey"), []byte(gwKey.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	keepalive := int32(1)
	in := model.Input{
		Gateway: &vpnv1.VPNGateway{
			ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "wg", UID: "wg-uid", Generation: 1},
			Spec: vpnv1.VPNGatewaySpec{
				Protocol: vpnv1.ProtocolWireGuard,
				Endpoint: vpnv1.Endpoint{HostNetwork: &vpnv1.HostNetworkEndpoint{NodeName: "node-2", Address: wgPublic.String()}},
				Exposures: []vpnv1.Exposure{{Name: "web", Target: vpnv1.ExposureTarget{Address: wgBackend.String(),
					Ports: ports(vpnv1.PortSpec{Port: 80, TargetPort: webPort})}}},
				WireGuard: &vpnv1.WireGuardGatewaySettings{ListenPort: 51820, PrivateKeySecretRef: &vpnv1.SecretKeyRef{Name: "gw-key", Key: "privateKey"}},
			},
		},
		Peers: []vpnv1.VPNPeer{{
			ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "w", UID: "w-uid", Generation: 1},
			Spec: vpnv1.VPNPeerSpec{GatewayRef: "wg", Authorization: &vpnv1.Authorization{Exposures: []string{"web"}},
				WireGuard: &vpnv1.WireGuardPeer{PublicKey: siteKey.PublicKey().String(), Subnets: []string{"203.0.113.128/28"},
					Endpoint: netip.AddrPortFrom(siteExt, 51821).String(), PersistentKeepalive: &keepalive}},
		}},
		Config:        model.Config{PoolCIDR: model.DefaultPoolCIDR},
		ServiceCIDR:   netip.MustParsePrefix("100.64.8.0/24"),
		PublicAddress: wgPublic.String(),
	}
	m, errs := model.Build(in)
	if errs != nil {
		t.Fatalf("model: %v", errs)
	}
	writeModel(t, cfgDir, m)
	dev := nft.WireGuardDevice(m)

	node.MustRun(bin, "init", "--config-dir", cfgDir)
	agent := node.Start(bin, "run", "--config-dir", cfgDir, "--secrets-dir", secDir, "--metrics-addr", "",
		"--wireguard-mode", "kernel", "--wireguard-state-file", filepath.Join(dir, "endpoints.json"))
	waitUntil(t, "agent configured "+dev, 60*time.Second, func() error {
		if agent.Exited() {
			t.Fatalf("agent exited:\n%s", agent.Output())
		}
		out, err := node.Run("wg", "show", dev, "peers")
		if err != nil || !strings.Contains(out, siteKey.PublicKey().String()) {
			return fmt.Errorf("wg show %s peers: %v %s", dev, err, out)
		}
		return nil
	})
	if out := node.MustRun("ip", "-d", "link", "show", dev); !strings.Contains(out, "wireguard") {
		t.Fatalf("%s is not a kernel WireGuard link:\n%s", dev, out)
	}
	t.Logf("the agent created %s as a kernel WireGuard device (ip -d link: wireguard)", dev)

	keyFile := filepath.Join(dir, "site.key")
	if err := os.WriteFile(keyFile, []byte(siteKey.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	site.MustRun("ip", "link", "add", "wg0", "type", "wireguard")
	site.MustRun("wg", "set", "wg0", "private-key", keyFile, "listen-port", "51821", "peer", gwKey.PublicKey().String(),
		"allowed-ips", m.ServiceCIDR.String(), "endpoint", netip.AddrPortFrom(wgPublic, 51820).String())
	site.MustRun("ip", "addr", "add", "203.0.113.129/32", "dev", "wg0")
	site.MustRun("ip", "link", "set", "wg0", "up")
	site.MustRun("ip", "route", "add", m.ServiceCIDR.String(), "dev", "wg0", "src", "203.0.113.129")
	src := netip.MustParseAddr("203.0.113.129")
	vip := m.Exposures[0].VirtualIP

	web := netip.AddrPortFrom(vip, 80).String()
	waitUntil(t, "site reaches web through kernel WireGuard", 30*time.Second, func() error {
		return request(site, "tcp", src, web, 2*time.Second)
	})
	t.Logf("granted: site w tcp -> %s answered through kernel WireGuard", web)
	counter := "w's drops"
	before := peerDropsIn(t, node, m, "w")
	if err := request(site, "tcp", src, netip.AddrPortFrom(vip, 81).String(), 700*time.Millisecond); err == nil {
		t.Error("site w reached port 81, which is not exposed")
	}
	if after := peerDropsIn(t, node, m, "w"); after <= before {
		t.Errorf("not exposed: dropped but %s did not count it (%d -> %d)", counter, before, after)
	} else {
		t.Logf("not granted: site w tcp -> %s:81 dropped, %s %d -> %d", vip, counter, before, after)
	}
	hs := strings.Fields(node.MustRun("wg", "show", dev, "latest-handshakes"))
	if len(hs) != 2 || hs[1] == "0" {
		t.Errorf("no handshake on %s: %v", dev, hs)
	}
	if _, err := os.Stat("/sys/module/wireguard"); err != nil {
		t.Errorf("the wireguard module is not loaded: %v", err)
	}
}
