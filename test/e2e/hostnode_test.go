package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/charontest"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// A host-network gateway touches only what it created. The gateway's namespace plays the node:
// before the gateway comes, it has a "pod" behind a veth (pod0) that holds an address inside a
// peer's subnet (203.0.113.5, in site a's 203.0.113.0/28), its own route for exactly site a's
// subnet and a wider one overlapping site b's (both via the pod), someone else's wg0 with a route,
// and a forwarded flow from the LAN to the pod. While the gateway runs and after its teardown:
//   - the node's routes and links are all still there, unchanged (ip route / ip link before and
//     after compared line by line); the gateway routes site b's subnet through its own device,
//     but not site a's, whose exact prefix the node already routes: site a's peer says so;
//   - the foreign wg0 is not adopted, not configured and not deleted;
//   - the LAN's and the node's new flows toward the pod's peer-like address keep working (the
//     ruleset's drops match the gateway's tunnel only);
//   - a device that has the gateway's own device name but that the gateway did not create is
//     refused, not adopted, and left in place.
//
// Site b's traffic through the tunnel proves the gateway works beside all of it.
func TestHostNetworkGatewayTouchesOnlyWhatItCreated(t *testing.T) {
	l := newLab(t, vpnv1.ProtocolWireGuard, uniqueNamespace("e2e-hostnode"), "bhn")
	a, b := l.newSite("a"), l.newSite("b") // 203.0.113.0/28, 203.0.113.16/28
	for _, s := range []*labSite{a, b} {
		l.configureDevice(s)
		l.createPeer(s, "web")
	}

	podFlows := nodesOwnThings(t, l, a)
	if err := podFlows(); err != nil {
		t.Fatalf("before the gateway: %v", err)
	}
	routes, links := nodeRoutes(l), nodeLinks(l)
	dev := l.wgDevice()
	t.Logf("the node before the gateway (its device will be %s):\n%s\n%s", dev, routes, links)

	t.Run("a device of its name it did not create is refused", func(t *testing.T) {
		l.gw.MustRun("ip", "link", "add", dev, "type", "bridge")
		defer l.gw.MustRun("ip", "link", "del", dev)
		agent := l.startAgent()
		waitFor(t, "the agent refusing the device", 20*time.Second, func() error {
			if out := agent.Output(); !strings.Contains(out, "refusing to use it") {
				return fmt.Errorf("no refusal in the agent's log: %s", tail(out))
			}
			return nil
		})
		if code, _, err := l.agentGet("/readyz"); err == nil && code == 200 {
			t.Error("the agent is ready with someone else's device")
		}
		_ = agent.Signal(syscall.SIGTERM)
		waitFor(t, "agent exited", 15*time.Second, func() error {
			if !agent.Exited() {
				return fmt.Errorf("still running")
			}
			return nil
		})
		if out, err := l.gw.Run("ip", "-d", "link", "show", dev); err != nil || !strings.Contains(out, "bridge") {
			t.Errorf("the device that is not the gateway's was removed or changed: %v %s", err, out)
		}
	})
	if got := nodeState(t, l); got != "" {
		t.Errorf("the refused gateway left %q on the node", got)
	}
	if got := nodeLinks(l); got != links {
		t.Fatalf("links after the refused start:\n%s\nwant\n%s", got, links)
	}
	if got := nodeRoutes(l); got != routes {
		t.Fatalf("routes after the refused start:\n%s\nwant\n%s", got, routes)
	}

	agent := l.startAgent()
	l.waitAgentReady(agent, 30*time.Second)
	waitFor(t, "site b through web", 60*time.Second, func() error { return b.request(l.web(53), time.Second) })

	// While it runs.
	during := nodeRoutes(l)
	for _, line := range strings.Split(routes, "\n") {
		if !strings.Contains("\n"+during+"\n", "\n"+line+"\n") {
			t.Errorf("the node's route %q is gone or changed while the gateway runs:\n%s", line, during)
		}
	}
	if !strings.Contains(during, b.subnet.String()+" dev "+dev+" proto 98") {
		t.Errorf("no route of the gateway for site b's %s through %s:\n%s", b.subnet, dev, during)
	}
	if strings.Contains(during, a.subnet.String()+" dev "+dev) {
		t.Errorf("the gateway routes site a's %s, which the node already routes:\n%s", a.subnet, during)
	}
	for _, line := range strings.Split(links, "\n") {
		if !strings.Contains("\n"+nodeLinks(l)+"\n", "\n"+line+"\n") {
			t.Errorf("the node's link %q is gone or changed while the gateway runs", line)
		}
	}
	if err := podFlows(); err != nil {
		t.Errorf("while the gateway runs: %v", err)
	}
	waitFor(t, "site a's peer reports the route it does not get", 30*time.Second, func() error {
		p, err := peerConnected(l.k8sNS, "a")
		if p == nil {
			return err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == vpnv1.ConditionConnected && strings.Contains(c.Message, a.subnet.String()) && strings.Contains(c.Message, "own route") {
				t.Logf("site a's Connected: %s %s", c.Status, c.Message)
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", p.Status.Conditions)
	})
	if out := l.gw.MustRun("ip", "-d", "link", "show", "wg0"); !strings.Contains(out, "tun type tun") || strings.Contains(out, wireguard.AliasPrefix) {
		t.Errorf("the foreign wg0 was touched: %s", out)
	}

	// After the pod went.
	stopAgent(t, agent)
	if got := nodeState(t, l); got != "" {
		t.Errorf("after the pod went: node state %q, want nothing of the gateway left", got)
	}
	if got := nodeRoutes(l); got != routes {
		t.Errorf("routes after the teardown:\n%s\nwant (before the gateway)\n%s", got, routes)
	}
	if got := nodeLinks(l); got != links {
		t.Errorf("links after the teardown:\n%s\nwant (before the gateway)\n%s", got, links)
	}
	if err := podFlows(); err != nil {
		t.Errorf("after the teardown: %v", err)
	}
}

// The same for a host-network IPsec gateway (kernel-libipsec): charon installs its routes into
// the tunnel into table 220, looked up before the node's main table and whatever install_routes
// says; with the gateway image's fwmark (charon.plugins.kernel-netlink.fwmark = nft.RouteMark)
// only the packets of the gateway's own flows, which its ruleset marks, consult it. So site a
// reaches its exposure through the tunnel although the node routes site a's subnet to the pod,
// and the node's flows toward the pod keep the node's route.
func TestHostNetworkIPsecGatewayLeavesTheNodesRoutesAlone(t *testing.T) {
	l := newLab(t, vpnv1.ProtocolIPsec, uniqueNamespace("e2e-hostnode-ipsec"), "")
	// The gateway image's charon (the lab's runs without the fwmark).
	l.gwCharon.Stop()
	waitFor(t, "the lab's charon stopped", 10*time.Second, func() error {
		if l.gwCharon.Running() {
			return fmt.Errorf("still running")
		}
		return nil
	})
	l.gwCharon = charontest.Start(t, l.cgw, "gw-image", gatewayCharonConfig())
	a, b := l.newSite("a"), l.newSite("b")
	for _, s := range []*labSite{a, b} {
		l.configureDevice(s)
		l.createPeer(s, "web")
	}
	podFlows := nodesOwnThings(t, l, a)
	if err := podFlows(); err != nil {
		t.Fatalf("before the gateway: %v", err)
	}
	main := func() string { return sortedLines(l.gw.MustRun("ip", "-4", "route", "show", "table", "main")) }
	// The node's links: charon's ipsec0 (up since the lab started charon) is the gateway's.
	nodeLinks := func(l *lab) string {
		var keep []string
		for _, line := range strings.Split(nodeLinks(l), "\n") {
			if !strings.Contains(line, " ipsec0: ") {
				keep = append(keep, line)
			}
		}
		return strings.Join(keep, "\n")
	}
	routes, links := main(), nodeLinks(l)

	agent := l.startAgent()
	l.waitAgentReady(agent, 30*time.Second)
	for _, s := range []*labSite{a, b} {
		waitFor(t, "site "+s.name+" through web", 60*time.Second, func() error { return s.request(l.web(53), time.Second) })
	}
	t.Logf("while the gateway runs:\n%s\ntable 220:\n%s", l.gw.MustRun("ip", "rule"), l.gw.MustRun("ip", "route", "show", "table", "220"))
	if err := podFlows(); err != nil {
		t.Errorf("while the gateway runs: %v (route: %s)", err, l.gw.MustRun("ip", "route", "get", "203.0.113.5", "from", labBackend.String(), "iif", "eth0"))
	}
	if got := main(); got != routes {
		t.Errorf("the main table while the gateway runs:\n%s\nwant\n%s", got, routes)
	}
	for _, line := range strings.Split(links, "\n") {
		if !strings.Contains("\n"+nodeLinks(l)+"\n", "\n"+line+"\n") {
			t.Errorf("the node's link %q is gone or changed while the gateway runs", line)
		}
	}

	l.gwCharon.Stop() // the pod goes
	stopAgent(t, agent)
	if got := nodeState(t, l); got != "" {
		t.Errorf("after the pod went: node state %q, want nothing of the gateway left", got)
	}
	if got := main(); got != routes {
		t.Errorf("the main table after the teardown:\n%s\nwant\n%s", got, routes)
	}
	if got := nodeLinks(l); got != links {
		t.Errorf("links after the teardown:\n%s\nwant\n%s", got, links)
	}
	if err := podFlows(); err != nil {
		t.Errorf("after the teardown: %v", err)
	}
}

// nodesOwnThings gives the lab's gateway namespace ("the node") what a node has before a
// gateway comes: a "pod" behind pod0 holding 203.0.113.5 (inside site a's subnet), the node's
// route for exactly site a's subnet and a wider one (203.0.113.0/24, metric 50), both via the
// pod, and someone else's wg0 with an address and a route. The LAN routes those ranges through
// the node. It returns the check of the flows toward the pod's peer-like address: forwarded
// from the LAN (UDP and TCP) and from the node itself.
func nodesOwnThings(t *testing.T, l *lab, a *labSite) func() error {
	t.Helper()
	var pod *netns.NS
	if l.crun != nil {
		pod = netns.Open(t, l.crun.Netns("pod").Name)
	} else {
		pod = l.nrun.NS("pod")
	}
	netns.VethAddr(l.gw, "pod0", "10.244.1.1/24", pod, "eth0", "10.244.1.2/24")
	pod.MustRun("ip", "route", "add", "default", "via", "10.244.1.1")
	podAddr := netip.MustParseAddr("203.0.113.5")
	pod.AddLoopback(podAddr.String() + "/32")
	echoServers(t, pod.Name, podAddr, 9000)
	l.gw.MustRun("ip", "route", "add", a.subnet.String(), "via", "10.244.1.2", "dev", "pod0")
	l.gw.MustRun("ip", "route", "add", "203.0.113.0/24", "via", "10.244.1.2", "dev", "pod0", "metric", "50")
	lanGW := strings.Split(labGatewayLAN, "/")[0]
	l.lan.MustRun("ip", "route", "add", "203.0.113.0/24", "via", lanGW)
	l.lan.MustRun("ip", "route", "add", "10.244.1.0/24", "via", lanGW)
	// Someone else's wg0: a persistent TUN, as a userspace WireGuard's device looks (this
	// kernel has no WireGuard module, and a running wireguard-go would put a machine-wide UAPI
	// socket named wg0 beside other tests').
	l.gw.MustRun("ip", "tuntap", "add", "dev", "wg0", "mode", "tun")
	l.gw.MustRun("ip", "addr", "add", "10.99.0.1/24", "dev", "wg0")
	l.gw.MustRun("ip", "link", "set", "wg0", "up")
	l.gw.MustRun("ip", "route", "add", "10.99.1.0/24", "dev", "wg0")

	to := netip.AddrPortFrom(podAddr, 9000).String()
	return func() error {
		if err := echo(l.lan.Name, "udp", labBackend, to); err != nil {
			return fmt.Errorf("LAN to the pod's %s (forwarded, UDP): %w", podAddr, err)
		}
		if err := echo(l.lan.Name, "tcp", labBackend, to); err != nil {
			return fmt.Errorf("LAN to the pod's %s (forwarded, TCP): %w", podAddr, err)
		}
		if err := echo(l.gw.Name, "tcp", netip.Addr{}, to); err != nil {
			return fmt.Errorf("node to the pod's %s (TCP): %w", podAddr, err)
		}
		return nil
	}
}

// nodeRoutes is the gateway namespace's IPv4 routing tables (all of them), sorted. IPv6 is
// left out: the gateway has none, and the kernel adds link-local routes of new links late.
func nodeRoutes(l *lab) string {
	return sortedLines(l.gw.MustRun("ip", "-4", "route", "show", "table", "all"))
}

// nodeLinks is the gateway namespace's links, one a line without counters, sorted.
func nodeLinks(l *lab) string {
	return sortedLines(l.gw.MustRun("ip", "-o", "link", "show"))
}

func sortedLines(s string) string {
	var lines []string
	for _, line := range strings.Split(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			lines = append(lines, line)
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// echo has one line echoed over network ("tcp" or "udp") from inside ns.
func echo(ns, network string, local netip.Addr, addr string) error {
	c, err := dialIn(ns, network, local, addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("hello\n")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if string(buf[:n]) != "hello\n" {
		return fmt.Errorf("answer %q", buf[:n])
	}
	return nil
}
