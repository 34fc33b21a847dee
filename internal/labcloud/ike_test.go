package labcloud_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/strongswan/charontest"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/openstack"
	"github.com/bnerd/bnerd-vpn-operator/internal/labcloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/netns"
)

const (
	ikeSiteID     = "site.example.test"
	ikeSiteSubnet = "192.0.2.0/24"
	ikeSiteHost   = "192.0.2.10"
	ikeService    = "100.64.30.0/24"
	ikeGwService  = "100.64.30.1"
	ikePSK        = "lab-cloud-ike-test-psk-0123456789"
)

// ikeConf is one end's swanctl.conf (PSK, IKEv2, one child).
func ikeConf(local, remote, localID, remoteID, localTS, remoteTS, start string) string {
	return fmt.Sprintf(`connections {
  c {
    version = 2
    local_addrs = %s
    remote_addrs = %s
    proposals = aes256gcm16-prfsha256-ecp256
    mobike = no
    local {
      auth = psk
      id = %s
    }
    remote {
      auth = psk
      id = %s
    }
    children {
      c {
        local_ts = %s
        remote_ts = %s
        esp_proposals = aes256gcm16-ecp256
        start_action = %s
      }
    }
  }
}
secrets {
  ike-c {
    id-1 = %s
    secret = "%s"
  }
}
`, local, remote, localID, remoteID, localTS, remoteTS, start, remoteID, ikePSK)
}

// The whole path of an OpenStack endpoint in namespaces, every piece real: the operator's
// provider creates port, security group (the site's address only) and floating IP in the lab
// cloud; its router translates and filters; the rendered attachment gives the gateway pod net1
// (macvlan on the node's provider link, by the real CNI plugins); the agent's uplink routing
// sends the pod's answers out of net1 although its default route is eth0; charon bound to the
// port's address (local_addrs, as rendered for the uplink) with the floating IP as its identity.
// A site's charon initiates to the floating IP: the tunnel comes up (NAT-T, since the cloud
// translates) and carries the site's traffic to the gateway's service address; nothing from
// the port's address left through eth0. Removing UDP 500 and 4500 from the port's group in the
// cloud leaves the site's negotiation unanswered; the operator's next Ensure restores them and
// the site negotiates again.
func TestIKEThroughTheFloatingIP(t *testing.T) {
	charontest.Skip(t, "nft", "socat")
	c := newLabCloud(t)
	tp := newTopology(t, c)
	node := tp.port
	p := c.provider(t, func(cfg *openstack.Config) { cfg.NADMaster = "p0" })
	req := gatewayRequest()
	req.PeerAddresses = []netip.Addr{netip.MustParseAddr(clientAddr)}
	res := ensureReady(t, p, req)
	t.Cleanup(func() { _ = p.Delete(context.Background(), req) })
	att, fip := res.Pod.NetworkAttachment, res.PublicAddress

	// The gateway pod: eth0 (its default route) toward the cluster, net1 from the NAD.
	pod, cluster := tp.run.NS("pod"), tp.run.NS("cluster")
	netns.VethAddr(pod, "eth0", "100.64.20.2/24", cluster, "c0", "100.64.20.1/24")
	pod.MustRun("ip", "route", "add", "default", "via", "100.64.20.1")
	pod.AddLoopback(ikeGwService + "/32")
	a := &labcloud.Attacher{CacheDir: t.TempDir(), NodeNetns: node.Name}
	ref := labcloud.Pod{Namespace: req.Namespace, Name: "edge-0", UID: "pod-uid-1", ContainerID: "sandbox-edge-0", NetNS: "/run/netns/" + pod.Name}
	if _, err := a.Add(context.Background(), att.Config, ref); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Del(context.Background(), att.Config, ref) })
	sent := pod.OutputCounters(att.FixedIP, "eth0", "net1")

	// The agent's part: the uplink's return path.
	addr, err := netip.ParsePrefix(att.Address)
	if err != nil {
		t.Fatal(err)
	}
	m := &model.Gateway{Uplink: &model.Uplink{Interface: "net1", Address: addr, Gateway: netip.MustParseAddr(att.GatewayIP)}}
	nsh, err := vnetns.GetFromName(pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := agent.EnsureUplink(h, m); err != nil {
		t.Fatal(err)
	}

	tp.client.AddLoopback(ikeSiteHost + "/32")
	gw := charontest.Start(t, pod, "gw", charontest.Config{})
	site := charontest.Start(t, tp.client, "site", charontest.Config{})
	if err := gw.LoadSwanctlConf(ikeConf(att.FixedIP, clientAddr, fip, ikeSiteID, ikeService, ikeSiteSubnet, "none")); err != nil {
		t.Fatal(err)
	}
	if err := site.LoadSwanctlConf(ikeConf(clientAddr, fip, ikeSiteID, fip, ikeSiteSubnet, ikeService, "start")); err != nil {
		t.Fatal(err)
	}
	var sas string
	if err := netns.Eventually(30*time.Second, func() error {
		out, err := site.Swanctl("--list-sas")
		if err != nil || !strings.Contains(out, "ESTABLISHED") || !strings.Contains(out, "INSTALLED") {
			return fmt.Errorf("no tunnel yet: %v\n%s", err, out)
		}
		sas = out
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("site's SAs:\n%s", sas)
	if !strings.Contains(sas, fip+"[4500]") {
		t.Errorf("the site's IKE SA is not with the floating IP over NAT-T (%s[4500])", fip)
	}
	gwSAs, _ := gw.Swanctl("--list-sas")
	if !strings.Contains(gwSAs, att.FixedIP+"[4500]") || !strings.Contains(gwSAs, clientAddr+"[4500]") {
		t.Errorf("the gateway's IKE SA is not between the port's address and the site:\n%s", gwSAs)
	}

	// The tunnel carries the site's traffic to the gateway's service address.
	if err := netns.Eventually(15*time.Second, func() error {
		r, err := tp.client.Ping(ikeSiteHost, ikeGwService, 3, 200*time.Millisecond, time.Second)
		if err != nil || r.Received == 0 {
			return fmt.Errorf("no answer through the tunnel: %v %+v", err, r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	eth0, net1 := sent("eth0"), sent("net1")
	t.Logf("packets from the port's address: via net1 %d, via eth0 %d", net1, eth0)
	if eth0 != 0 || net1 == 0 {
		t.Fatalf("packets from the port's address: via net1 %d, via eth0 %d", net1, eth0)
	}

	// Without UDP 500 and 4500 in the port's group the cloud drops IKE: the site cannot
	// negotiate again. The operator's next Ensure restores the rules and it can.
	sc := c.network(t)
	var group string
	for _, port := range c.PortList() {
		if port.ID == att.PortID {
			group = port.SecurityGroups[0]
		}
	}
	for _, r := range c.RuleList(group) {
		if r.Protocol != nil && *r.Protocol == "udp" {
			if err := rules.Delete(context.Background(), sc, r.ID).ExtractErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	reconnect := func() error {
		if out, err := site.Swanctl("--terminate", "--ike", "c"); err != nil && !strings.Contains(out, "no matching SAs") {
			return fmt.Errorf("terminate: %v\n%s", err, out)
		}
		out, err := site.Swanctl("--initiate", "--child", "c", "--timeout", "5")
		if err != nil {
			return fmt.Errorf("initiate: %v\n%s", err, out)
		}
		return nil
	}
	var refused error
	if err := netns.Eventually(20*time.Second, func() error {
		if refused = reconnect(); refused == nil {
			return errors.New("the site negotiated although the group admits no IKE")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(refused.Error(), "initiate") {
		t.Fatalf("the site's negotiation failed otherwise: %v", refused)
	}
	if tbl := tp.table(t); strings.Contains(tbl, "udp dport") {
		t.Fatalf("the router still admits UDP:\n%s", tbl)
	}
	t.Logf("without UDP 500/4500 in the group the site cannot negotiate: %s", lastLine(refused.Error()))
	ensureReady(t, p, req)
	if err := netns.Eventually(30*time.Second, reconnect); err != nil {
		t.Fatal(err)
	}
	t.Log("the operator restored the rules: the site negotiated again")
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
