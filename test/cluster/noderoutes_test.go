package cluster

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
)

// nodeRoutes is the node's IPv4 main routing table and its policy rules, as text: what a
// host-network gateway must leave alone (its routes into the tunnel live in charon's table 220
// and its WireGuard routes are its own, proto 98). The one rule the gateway adds — charon's,
// consulting table 220 for packets carrying the gateway's RouteMark alone — is left out: it
// is the gateway's own and touches no other packet.
func nodeRoutes(t *testing.T) string {
	t.Helper()
	routes, err := L.run(10*time.Second, "ip", "-4", "route", "show", "table", "main")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := L.run(10*time.Second, "ip", "-4", "rule", "show")
	if err != nil {
		t.Fatal(err)
	}
	own := fmt.Sprintf("fwmark %#x/%#x lookup 220", nft.RouteMark, nft.RouteMark)
	var kept []string
	for _, l := range strings.Split(strings.TrimSpace(rules), "\n") {
		if !strings.Contains(l, own) {
			kept = append(kept, strings.TrimSpace(l))
		}
	}
	return strings.TrimSpace(routes) + "\n--- rules\n" + strings.Join(kept, "\n")
}

// routesWhileRunning is the node's routing while the lab's host-network gateway runs (read at
// the start of the suite), compared with the routing once it is deleted (step 9).
var routesWhileRunning string

// compareNodeRoutes: the node's routes and rules are the same with and without the gateway.
func compareNodeRoutes(t *testing.T) {
	after := nodeRoutes(t)
	if routesWhileRunning == "" {
		t.Fatal("the routes while the gateway ran were not read")
	}
	if after != routesWhileRunning {
		t.Errorf("the node's routing differs with the host-network gateway running:\n%s\nand after it was deleted:\n%s", routesWhileRunning, after)
		return
	}
	t.Logf("the node's main table and rules are the same with the host-network gateway running and after it was deleted (%d lines)", strings.Count(after, "\n")+1)
}

// lookalikeIndex is the lab site index of a LAN that a peer of the host-network gateway claims
// while the LAN is in fact reached by the node's own routes, outside any tunnel.
const lookalikeIndex = 12

// 4g: a host-network gateway leaves the node's other traffic alone. The node's routing is read
// (and compared once the gateway is deleted, step 9). A peer "lookalike" of the host-network
// gateway claims 203.0.113.192/28 (it never connects); the same range is, as far as the node is
// concerned, a LAN behind one of its own links (a network namespace with a listener). A pod and
// the node itself reach that LAN: the gateway's per-peer drops match only its tunnel, not every
// flow toward a peer's subnet.
func test4gNodeTrafficUntouched(t *testing.T) {
	routesWhileRunning = nodeRoutes(t)

	if err := L.ipsecPeer("lookalike", lookalikeIndex, "lab-lookalike-"+randomHex(12), []string{"web"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, o := range []client.Object{
			&vpnv1.VPNPeer{ObjectMeta: metav1.ObjectMeta{Name: "lookalike", Namespace: labNS}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "lookalike-psk", Namespace: labNS}},
		} {
			if err := L.deleteAndWait(o, 60*time.Second); err != nil {
				t.Error(err)
			}
		}
	})
	lan := siteLAN(lookalikeIndex)
	// the peer's subnet is in the node's ruleset (the peer map of its prefix length)
	lanPrefix := netip.MustParsePrefix(lan)
	peerOut := fmt.Sprintf("%s_%d", nft.SetPeer, lanPrefix.Bits())
	if err := eventually(60*time.Second, func() error {
		out, err := L.run(10*time.Second, "nft", "list", "map", "ip", "bnerd_vpn", peerOut)
		if err != nil {
			return err
		}
		if !strings.Contains(out, lanPrefix.Addr().String()+" : ") {
			return fmt.Errorf("%s not yet in the gateway's %s map", lan, peerOut)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	if _, err := L.sh(30*time.Second, fmt.Sprintf(`site_netns lookalike %d && ip route add %s via %s`,
		lookalikeIndex, lan, siteLinkSite(lookalikeIndex))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = L.run(10*time.Second, "ip", "route", "del", lan)
		_, _ = L.run(10*time.Second, "ip", "netns", "del", "lab-site-lookalike")
		_, _ = L.run(10*time.Second, "ip", "link", "del", fmt.Sprintf("lab-s%d", lookalikeIndex))
	})
	lanListener(t, "lookalike", lookalikeIndex)
	url := fmt.Sprintf("http://%s:2222/", siteHost(lookalikeIndex))

	pod := labPod(labNS, "lookalike-client-"+randomHex(3), nil)
	c, cancel := ctx(30 * time.Second)
	defer cancel()
	if err := L.c.Create(c, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = L.deleteAndWait(pod, 60*time.Second) })
	if _, err := L.podRunning(labNS, pod.Name, 60*time.Second); err != nil {
		t.Fatal(err)
	}

	t.Run("a pod reaches an address inside a peer's subnet through the node's own route", func(t *testing.T) {
		var out string
		err := eventually(30*time.Second, func() error {
			var err error
			out, err = L.podExec(20*time.Second, labNS, pod.Name, "/pause", "get", url)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("pod -> %s: %s", url, strings.TrimSpace(out))
	})
	t.Run("the node reaches it too", func(t *testing.T) {
		var out string
		err := eventually(30*time.Second, func() error { // the lab's one-line server once gave an empty reply
			var err error
			out, err = L.run(15*time.Second, "curl", "-sS", "--max-time", "5", url)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("node -> %s: %s", url, strings.TrimSpace(out))
	})
}
