package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/charontest"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

const sitePSK = "e2e-psk-5d41402abc4b2a76b9719d911017c592"

// siteSwanctlConf is the client's device, configured from our parameter sheet: its subnet,
// our service CIDR as its remote network, our public address as our identity.
func siteSwanctlConf(serviceCIDR string) string {
	return `connections {
  gw {
    version = 2
    local_addrs = 198.51.100.2
    remote_addrs = 198.51.100.1
    proposals = aes256gcm16-prfsha256-ecp256
    dpd_delay = 1s
    mobike = no
    local { auth = psk
            id = site-a.example.com }
    remote { auth = psk
             id = 198.51.100.1 }
    children {
      net {
        local_ts = 203.0.113.0/28
        remote_ts = ` + serviceCIDR + `
        esp_proposals = aes256gcm16-ecp256
        start_action = start
        dpd_action = restart
      }
    }
  }
}
secrets {
  ike-gw {
    id-1 = site-a.example.com
    id-2 = 198.51.100.1
    secret = "` + sitePSK + `"
  }
}
`
}

// CR → operator → agent → charon (kernel-libipsec) ↔ the client's charon → TCP through the
// exposure → VPNPeer Connected; then the client's daemon dies (Down within the DPD window)
// and comes back (Connected again) without anyone touching the gateway.
func TestIPsecTunnelPeerLossAndReturn(t *testing.T) {
	ctx := context.Background()
	run := charontest.NewRun(t)
	site, gwNS, lan := run.Netns("site"), run.Netns("gw"), run.Netns("lan")
	charontest.Veth(site, "ext0", "198.51.100.2/24", gwNS, "ext0", "198.51.100.1/24")
	charontest.Veth(gwNS, "eth0", "198.51.100.129/25", lan, "eth0", "198.51.100.130/25")
	site.AddLoopback("203.0.113.1/32")
	gwNS.MustRun("sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
	gw := netns.Open(t, gwNS.Name)
	netns.Open(t, lan.Name).Start("socat", "TCP-LISTEN:8080,reuseaddr,fork", "SYSTEM:echo web-ok")

	ns := newNamespace(t, "e2e-ipsec")
	objs := []client.Object{
		gen.PSKSecret(ns, "site-a", sitePSK),
		gen.VPNGateway(ns, "gw", gen.HostNetwork("node-1", "198.51.100.1"),
			gen.Exposure("web", "198.51.100.130", vpnv1.PortSpec{Port: 80, TargetPort: 8080}), gen.DPDDelay(time.Second)),
		gen.VPNPeer(ns, "site-a", gen.IPsecPeer("198.51.100.2", "site-a.example.com"), gen.RemoteSubnets("203.0.113.0/28")),
	}
	gateway := createRendered(t, ns, objs, nil)
	vip := gateway.Status.Exposures[0].VirtualIP

	start := time.Now()
	gwCharon := charontest.Start(t, gwNS, "gw", charontest.Config{})
	agentProc := gatewayAgent(t, gw, ns, "gw", "--vici-socket", gwCharon.URI())
	siteCharon := charontest.Start(t, site, "site", charontest.Config{})
	if err := siteCharon.LoadSwanctlConf(siteSwanctlConf(gateway.Status.ServiceCIDR)); err != nil {
		t.Fatal(err)
	}

	waitFor(t, "TCP through the exposure", 30*time.Second, func() error {
		out, err := site.Run("socat", "-T", "2", "-", fmt.Sprintf("TCP:%s:80,bind=203.0.113.1,connect-timeout=1", vip))
		if err != nil || !strings.Contains(out, "web-ok") {
			return fmt.Errorf("%v %q (agent: %s)", err, out, tail(agentProc.Output()))
		}
		return nil
	})
	t.Logf("CR to traffic through the tunnel: %s", time.Since(start).Round(time.Millisecond))
	waitFor(t, "VPNPeer Connected with bytes", 30*time.Second, func() error {
		p := &vpnv1.VPNPeer{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "site-a"}, p); err != nil {
			return err
		}
		if err := connected(ctx, ns, "site-a"); err != nil {
			return err
		}
		if p.Status.Tunnel == nil || p.Status.Tunnel.BytesIn == 0 || p.Status.Tunnel.EstablishedAt == nil {
			return fmt.Errorf("tunnel status %+v", p.Status.Tunnel)
		}
		return nil
	})
	t.Logf("CR to Connected (daemons and agent start included): %s", time.Since(start).Round(time.Millisecond))

	// The client's daemon dies: dead peer detection marks the peer down.
	siteCharon.Kill()
	lost := time.Now()
	waitFor(t, "VPNPeer down after the site died", 20*time.Second, func() error {
		if connected(ctx, ns, "site-a") == nil {
			return fmt.Errorf("still connected (agent: %s)", tail(agentProc.Output()))
		}
		return nil
	})
	t.Logf("site loss to Down: %s", time.Since(lost).Round(time.Millisecond))

	// It comes back: the tunnel heals without any change on the gateway.
	if err := siteCharon.Start(); err != nil {
		t.Fatal(err)
	}
	if err := siteCharon.LoadSwanctlConf(siteSwanctlConf(gateway.Status.ServiceCIDR)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "VPNPeer connected again", 30*time.Second, func() error { return connected(ctx, ns, "site-a") })
	if strings.Contains(agentProc.Output(), sitePSK) || strings.Contains(gwCharon.Log(), sitePSK) {
		t.Error("the pre-shared key appears in the agent's or charon's log")
	}
}
