package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/charontest"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// A legacy IPsecGateway with two tunnels, through the operator (translated into the unified
// model), the real agent (told it serves an IPsecGateway) and charon (kernel-libipsec), to two
// client sites' own charons: every tunnel reaches every exposure over TCP and UDP (the legacy
// rule: no per-tunnel scope), and the agent reports both tunnels Established in the
// IPsecGateway's status.tunnels[] and tunnelsUp — with no VPNPeer anywhere.
func TestLegacyIPsecGatewayTwoTunnels(t *testing.T) {
	ctx := context.Background()
	run := charontest.NewRun(t)
	gwNS, lan := run.Netns("gw"), run.Netns("lan")
	netns.Veth(gwNS, "eth0", lan, "eth0")
	gwNS.MustRun("ip", "addr", "add", labGatewayLAN, "dev", "eth0")
	lan.MustRun("ip", "addr", "add", labBackendLAN, "dev", "eth0")
	gwNS.Sysctl("net.ipv4.ip_forward", "1")
	echoServers(t, lan.Name, labBackend, labWebPort)
	echoServers(t, lan.Name, labBackend, labOtherPort)

	// Two sites, each on its own point-to-point link to the gateway's one public address.
	var sites []*labSite
	for i, name := range []string{"hq", "branch"} {
		s := &labSite{
			name:   name,
			ext:    netip.AddrFrom4([4]byte{198, 51, 100, byte(2 + i)}),
			subnet: netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(16 * i)}), 28),
			addr:   netip.AddrFrom4([4]byte{203, 0, 113, byte(16*i + 1)}),
			psk:    "e2e-legacy-psk-" + name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36),
		}
		s.cns = run.Netns("s" + strconv.Itoa(i))
		s.ns = s.cns
		gwIf := "ext" + strconv.Itoa(i)
		netns.Veth(gwNS, gwIf, s.ns, "ext0")
		gwNS.MustRun("ip", "addr", "add", labGatewayAddr.String()+"/32", "peer", s.ext.String()+"/32", "dev", gwIf)
		s.ns.MustRun("ip", "addr", "add", s.ext.String()+"/32", "peer", labGatewayAddr.String()+"/32", "dev", "ext0")
		s.ns.MustRun("ip", "addr", "add", s.addr.String()+"/32", "dev", "lo")
		sites = append(sites, s)
	}

	ns := newNamespace(t, "e2e-legacy")
	ports := func(target int32) []intstr.IntOrString {
		return vpnv1.Ports(vpnv1.PortSpec{Port: 80, TargetPort: target}, vpnv1.PortSpec{Port: 53, TargetPort: target, Protocol: vpnv1.PortProtocolUDP})
	}
	dpd := metav1.Duration{Duration: time.Second}
	g := &ipsecv1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"}, Spec: ipsecv1.IPsecGatewaySpec{
		// A node of its own: the other tests' host-network gateways hold node-1.
		Endpoint: vpnv1.Endpoint{HostNetwork: &vpnv1.HostNetworkEndpoint{NodeName: "node-legacy", Address: labGatewayAddr.String()}},
		Exposures: []vpnv1.Exposure{
			{Name: "web", Target: vpnv1.ExposureTarget{Address: labBackend.String(), Ports: ports(labWebPort)}},
			{Name: "other", Target: vpnv1.ExposureTarget{Address: labBackend.String(), Ports: ports(labOtherPort)}},
		},
		IKE: vpnv1.IKESettings{DPD: &vpnv1.DPDSettings{Delay: &dpd}},
	}}
	for _, s := range sites {
		if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.name + "-psk"},
			Data: map[string][]byte{"psk": []byte(s.psk)}}); err != nil {
			t.Fatal(err)
		}
		g.Spec.Tunnels = append(g.Spec.Tunnels, ipsecv1.Tunnel{
			Name: s.name, Peer: vpnv1.IPsecRemote{Address: s.ext.String(), ID: s.name + ".example.com"},
			RemoteSubnets: []string{s.subnet.String()}, PSKSecretRef: vpnv1.SecretKeyRef{Name: s.name + "-psk", Key: "psk"},
		})
	}
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "IPsecGateway rendered", 30*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(g.Status.Conditions, vpnv1.ConditionRendered) || len(g.Status.Exposures) != 2 || g.Status.ServiceCIDR == "" {
			return fmt.Errorf("status %+v", g.Status)
		}
		return nil
	})
	serviceCIDR := netip.MustParsePrefix(g.Status.ServiceCIDR)
	vips := map[string]netip.Addr{}
	for _, e := range g.Status.Exposures {
		vips[e.Name] = netip.MustParseAddr(e.VirtualIP)
	}

	start := time.Now()
	gwCharon := charontest.Start(t, gwNS, "gw", charontest.Config{})
	kubeconfig := serviceAccountKubeconfig(t, ns, children.NameFor(model.KindIPsecGateway, "gw"), apiProxy(t, gwNS))
	agentProc := gwNS.Start("env", "KUBECONFIG="+kubeconfig, agentBin, "run", "--userspace-dataplane",
		"--gateway", "gw", "--gateway-kind", model.KindIPsecGateway, "--namespace", ns,
		"--config-map", children.ConfigMapNameFor(model.KindIPsecGateway, "gw"),
		"--metrics-addr", "127.0.0.1:9090", "--status-interval", "1s", "--teardown-wait", "5s", "--vici-socket", gwCharon.URI())
	for _, s := range sites {
		s.charon = charontest.Start(t, s.cns, s.name, charontest.Config{})
		if err := s.charon.LoadSwanctlConf(labSwanctlConf(s, serviceCIDR)); err != nil {
			t.Fatal(err)
		}
	}

	// Every tunnel reaches every exposure, over TCP and UDP.
	for _, s := range sites {
		for _, name := range []string{"web", "other"} {
			tcp := netip.AddrPortFrom(vips[name], 80).String()
			udp := netip.AddrPortFrom(vips[name], 53).String()
			waitFor(t, s.name+" to "+name, 30*time.Second, func() error {
				if err := s.tcpRequest(tcp, 2*time.Second); err != nil {
					return fmt.Errorf("TCP %s: %v (agent: %s)", tcp, err, tail(agentProc.Output()))
				}
				if err := s.request(udp, 2*time.Second); err != nil {
					return fmt.Errorf("UDP %s: %v", udp, err)
				}
				return nil
			})
		}
	}
	t.Logf("CR to traffic through both tunnels to both exposures: %s", time.Since(start).Round(time.Millisecond))

	// The agent reports both tunnels into the IPsecGateway's status.
	waitFor(t, "both tunnels Established in the IPsecGateway's status", 30*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
			return err
		}
		if g.Status.TunnelsUp != "2/2" || len(g.Status.Tunnels) != 2 {
			return fmt.Errorf("tunnels %+v, up %q (agent: %s)", g.Status.Tunnels, g.Status.TunnelsUp, tail(agentProc.Output()))
		}
		for _, tu := range g.Status.Tunnels {
			if tu.State != "Established" || tu.EstablishedAt == nil || tu.BytesIn == 0 {
				return fmt.Errorf("tunnel %+v", tu)
			}
		}
		return nil
	})
	// The operator's conditions stay beside the agent's tunnels.
	if !meta.IsStatusConditionTrue(g.Status.Conditions, vpnv1.ConditionRendered) {
		t.Errorf("conditions after the agent's writes: %+v", g.Status.Conditions)
	}
	var peers vpnv1.VPNPeerList
	if err := env.Client.List(ctx, &peers, client.InNamespace(ns)); err != nil || len(peers.Items) != 0 {
		t.Errorf("VPNPeers in a legacy gateway's namespace: %d (%v)", len(peers.Items), err)
	}

	// One site goes away: its tunnel is reported Down, the other stays Established.
	sites[1].charon.Kill()
	waitFor(t, "branch Down, hq Established", 30*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
			return err
		}
		states := map[string]string{}
		for _, tu := range g.Status.Tunnels {
			states[tu.Name] = tu.State
		}
		if g.Status.TunnelsUp != "1/2" || states["hq"] != "Established" || states["branch"] == "Established" {
			return fmt.Errorf("tunnels %+v, up %q", g.Status.Tunnels, g.Status.TunnelsUp)
		}
		return nil
	})
	if err := sites[0].tcpRequest(netip.AddrPortFrom(vips["web"], 80).String(), 2*time.Second); err != nil {
		t.Errorf("hq after branch went: %v", err)
	}
}
