package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/charontest"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// A client's parameter sheet says "NAT-T: forced" and "MTU 1300": spec.ipsec.forceEncapsulation
// and spec.ipsec.mtu. With real charon daemons and no NAT between them, the site's unchanged
// configuration gets its tunnel (IKE SA on UDP 4500, the CHILD_SA in UDP: the userspace
// dataplane, kernel-libipsec, always encapsulates, so the kernel dataplane's
// TestGuestKernelForcedEncapsulation in the VM shows what the field changes there), and a TCP
// connection from the site's LAN through the exposure arrives with its MSS clamped to 1260
// (counted on the server's side); without the fields, to 1360 (MTU 1400).
func TestIPsecForcedEncapsulationAndMTU(t *testing.T) {
	// Subtest names end up in socket paths: keep them short.
	for _, tc := range []struct {
		name string
		mods []gen.GatewayMod
		mss  int
	}{
		{"forced", []gen.GatewayMod{gen.ForceEncapsulation(), gen.IPsecMTU(1300)}, 1260},
		{"defaults", nil, 1360},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := charontest.NewRun(t)
			site, gwNS, lan := run.Netns("site"), run.Netns("gw"), run.Netns("lan")
			charontest.Veth(site, "ext0", "198.51.100.2/24", gwNS, "ext0", "198.51.100.1/24")
			charontest.Veth(gwNS, "eth0", "198.51.100.129/25", lan, "eth0", "198.51.100.130/25")
			site.AddLoopback("203.0.113.1/32")
			gwNS.MustRun("sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
			gw := netns.Open(t, gwNS.Name)
			server := netns.Open(t, lan.Name)
			server.Start("socat", "TCP-LISTEN:8080,reuseaddr,fork", "SYSTEM:echo web-ok")
			// SYNs reaching the server with the MSS the gateway clamps to, counted
			lan.MustRun("nft", fmt.Sprintf("table ip e2e_mss { counter clamped {}; chain in { type filter hook input priority 0; tcp dport 8080 tcp flags syn tcp option maxseg size %d counter name clamped; }; }", tc.mss))

			ns := newNamespace(t, "e2e-knobs")
			objs := []client.Object{
				gen.PSKSecret(ns, "site-a", sitePSK),
				gen.VPNGateway(ns, "gw", append([]gen.GatewayMod{gen.HostNetwork("node-1", "198.51.100.1"),
					gen.Exposure("web", "198.51.100.130", vpnv1.PortSpec{Port: 80, TargetPort: 8080}), gen.DPDDelay(time.Second)}, tc.mods...)...),
				gen.VPNPeer(ns, "site-a", gen.IPsecPeer("198.51.100.2", "site-a.example.com"), gen.RemoteSubnets("203.0.113.0/28")),
			}
			gateway := createRendered(t, ns, objs, nil)
			vip := gateway.Status.Exposures[0].VirtualIP
			gwCharon := charontest.Start(t, gwNS, "gw", charontest.Config{})
			agentProc := gatewayAgent(t, gw, ns, "gw", "--vici-socket", gwCharon.URI())
			siteCharon := charontest.Start(t, site, "site", charontest.Config{})
			if err := siteCharon.LoadSwanctlConf(siteSwanctlConf(gateway.Status.ServiceCIDR)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "TCP through the exposure", 30*time.Second, func() error {
				out, err := site.Run("socat", "-T", "2", "-", fmt.Sprintf("TCP:%s:80,bind=203.0.113.1,connect-timeout=1", vip))
				if err != nil || !strings.Contains(out, "web-ok") {
					var evs corev1.EventList
					_ = env.Client.List(context.Background(), &evs, client.InNamespace(ns))
					var notes []string
					for _, e := range evs.Items {
						notes = append(notes, e.Reason+": "+e.Message)
					}
					return fmt.Errorf("%v %q (agent: %s; events: %s)", err, out, tail(agentProc.Output()), strings.Join(notes, " | "))
				}
				return nil
			})
			sas, err := siteCharon.Swanctl("--list-sas")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(sas, "TUNNEL-in-UDP") || !strings.Contains(sas, "198.51.100.1[4500]") {
				t.Fatalf("the site's SAs are not ESP in UDP on port 4500:\n%s", sas)
			}
			out := lan.MustRun("nft", "list", "counter", "ip", "e2e_mss", "clamped")
			if strings.Contains(out, "packets 0 ") {
				t.Fatalf("no SYN reached the server with MSS %d:\n%s", tc.mss, out)
			}
			t.Logf("without a NAT: the CHILD_SA is ESP in UDP on port 4500; SYNs arrive with MSS %d", tc.mss)
		})
	}
}
