package wireguard_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	rwg "github.com/bnerd/bnerd-vpn-operator/internal/render/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/wgtest"
)

func TestMain(m *testing.M) { wgtest.Main(m) }

const nsPrefix = "bwgd"

var (
	gwKeyRef    = model.SecretKeyRef{Name: "acme-wireguard-key", Key: "privateKey"}
	siteKeyRef  = model.SecretKeyRef{Name: "site-key", Key: "privateKey"}
	site2KeyRef = model.SecretKeyRef{Name: "site2-key", Key: "privateKey"}
	pskRef      = model.SecretKeyRef{Name: "site-a-wireguard", Key: "presharedKey"}
	missingRef  = model.SecretKeyRef{Name: "site-c-wireguard", Key: "presharedKey"}
)

func pfx(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, v := range s {
		out[i] = netip.MustParsePrefix(v)
	}
	return out
}

func gatewayConfig(peers ...rwg.Peer) *rwg.Config {
	return &rwg.Config{
		Gateway: "tenant-a/acme",
		Interface: rwg.Interface{
			ListenPort: 51820,
			Address:    netip.MustParsePrefix("100.64.7.1/24"),
			MTU:        1420,
			PrivateKey: gwKeyRef,
		},
		Peers: peers,
	}
}

// siteConfig is a client's device: its subnet's address on the tunnel, the gateway as its
// one peer with the gateway's service CIDR as allowed IPs.
func siteConfig(ref model.SecretKeyRef, addr string, gw rwg.Peer) *rwg.Config {
	return &rwg.Config{
		Gateway: "client-site",
		Interface: rwg.Interface{
			ListenPort: 51820,
			Address:    netip.MustParsePrefix(addr),
			MTU:        1420,
			PrivateKey: ref,
		},
		Peers: []rwg.Peer{gw},
	}
}

func ping(ns *netns.NS, dst string) error {
	out, err := ns.Run("ping", "-n", "-c", "1", "-W", "1", dst)
	if err != nil {
		return fmt.Errorf("ping %s from %s: %v: %s", dst, ns.Name, err, out)
	}
	return nil
}

func peerState(n *wgtest.Node, name string) (agent.PeerState, error) {
	peers, err := n.Peers()
	if err != nil {
		return agent.PeerState{}, err
	}
	s, ok := peers[name]
	if !ok {
		return s, fmt.Errorf("no peer %q in %v", name, peers)
	}
	return s, nil
}

// waitState polls until peer name of n satisfies ok.
func waitState(t *testing.T, n *wgtest.Node, name string, timeout time.Duration, ok func(agent.PeerState) error) agent.PeerState {
	t.Helper()
	var s agent.PeerState
	err := netns.Eventually(timeout, func() error {
		var err error
		if s, err = peerState(n, name); err != nil {
			return err
		}
		return ok(s)
	})
	if err != nil {
		t.Fatalf("%s: peer %s: %v (state %+v)", n.NS.Name, name, err, s)
	}
	return s
}

func established(s agent.PeerState) error {
	if s.State != agent.StateEstablished || !s.Connected() {
		return fmt.Errorf("state %s (%s)", s.State, s.Message)
	}
	if s.LastHandshake.IsZero() || s.EstablishedAt.IsZero() {
		return errors.New("no handshake time")
	}
	if s.BytesIn == 0 || s.BytesOut == 0 {
		return fmt.Errorf("bytes in %d out %d", s.BytesIn, s.BytesOut)
	}
	return nil
}

// ourRoutes lists the driver's routes (proto 98) through dev in ns.
func ourRoutes(t *testing.T, ns *netns.NS, dev string) []string {
	t.Helper()
	out := ns.MustRun("ip", "-j", "route", "show", "dev", dev, "proto", strconv.Itoa(wireguard.RouteProtocol))
	var routes []struct {
		Dst string `json:"dst"`
	}
	if strings.TrimSpace(out) != "" {
		if err := json.Unmarshal([]byte(out), &routes); err != nil {
			t.Fatalf("ip -j route: %v: %s", err, out)
		}
	}
	var dsts []string
	for _, r := range routes {
		dsts = append(dsts, r.Dst)
	}
	slices.Sort(dsts)
	return dsts
}

func devicePeer(t *testing.T, n *wgtest.Node, key wgtypes.Key) *wgtypes.Peer {
	t.Helper()
	dev, err := n.Device()
	if err != nil {
		t.Fatalf("reading %s through UAPI: %v", n.Interface, err)
	}
	for i := range dev.Peers {
		if dev.Peers[i].PublicKey == key {
			return &dev.Peers[i]
		}
	}
	return nil
}

var pingSummary = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)

// TestTunnelLifecycle runs the gateway's driver in namespace "gw" and two client sites'
// devices (the same driver, as a client's wireguard-go would be configured) in "site" and
// "site2", and checks the handshake, status, a live peer addition without disturbing the first
// peer, a peer with a missing pre-shared key, peer removal, and that no key appears in any
// log or error.
func TestTunnelLifecycle(t *testing.T) {
	netns.Skip(t, "ping")
	run := netns.NewRun(t, nsPrefix)
	gw, site, site2 := run.NS("gw"), run.NS("site"), run.NS("site2")
	netns.Veth(site, "vsite", gw, "vgw1")
	netns.Veth(site2, "vsite2", gw, "vgw2")
	site.MustRun("ip", "addr", "add", "198.51.100.1/24", "dev", "vsite")
	gw.MustRun("ip", "addr", "add", "198.51.100.2/24", "dev", "vgw1")
	site2.MustRun("ip", "addr", "add", "192.0.2.1/24", "dev", "vsite2")
	gw.MustRun("ip", "addr", "add", "192.0.2.2/24", "dev", "vgw2")

	gwKey, siteKey, site2Key, psk := wgtest.NewKey(t), wgtest.NewKey(t), wgtest.NewKey(t), wgtest.NewKey(t)
	cKey := wgtest.NewKey(t)
	keys := map[string]wgtypes.Key{"gateway private key": gwKey, "site private key": siteKey, "site2 private key": site2Key, "pre-shared key": psk}
	var transcript []string // every error and status the test saw, scanned for keys at the end
	defer func() {
		if found := wgtest.FindKeys(strings.Join(transcript, "\n"), keys); len(found) > 0 {
			t.Errorf("key material in errors or status: %v", found)
		}
	}()

	gwNode := wgtest.Start(t, gw, wgtest.Options{InterfaceName: wgtest.UniqueInterfaceName("g")})
	siteNode := wgtest.Start(t, site, wgtest.Options{InterfaceName: wgtest.UniqueInterfaceName("s")})
	site2Node := wgtest.Start(t, site2, wgtest.Options{InterfaceName: wgtest.UniqueInterfaceName("t")})
	t.Logf("gateway device %s (%s), sites %s, %s", gwNode.Interface, gwNode.Mode, siteNode.Interface, site2Node.Interface)
	nodes := []*wgtest.Node{gwNode, siteNode, site2Node}
	defer func() {
		for _, n := range nodes {
			if found := wgtest.FindKeys(n.Log(), keys); len(found) > 0 {
				t.Errorf("%s: key material in the log: %v", n.NS.Name, found)
			}
		}
		if t.Failed() {
			for _, n := range nodes {
				t.Logf("%s log:\n%s", n.NS.Name, n.Log())
			}
		}
	}()

	secrets := wgtest.Secrets{
		gwKeyRef:    []byte(gwKey.String()),
		siteKeyRef:  []byte(siteKey.String() + "\n"), // as kubectl create secret --from-file leaves it
		site2KeyRef: []byte(site2Key.String()),
		pskRef:      []byte(psk.String()),
	}
	peerA := rwg.Peer{Name: "site-a", PublicKey: siteKey.PublicKey().String(), AllowedIPs: pfx("203.0.113.0/28"), PresharedKey: &pskRef}
	peerB := rwg.Peer{Name: "site-b", PublicKey: site2Key.PublicKey().String(), AllowedIPs: pfx("203.0.113.16/28", "203.0.113.64/27")}
	peerC := rwg.Peer{Name: "site-c", PublicKey: cKey.PublicKey().String(), AllowedIPs: pfx("203.0.113.32/28"), PresharedKey: &missingRef}
	gwPub := gwKey.PublicKey().String()

	apply := func(n *wgtest.Node, cfg *rwg.Config) {
		t.Helper()
		if err := n.Apply(cfg, secrets); err != nil {
			transcript = append(transcript, err.Error())
			t.Fatalf("%s: apply: %v", n.NS.Name, err)
		}
	}

	// 1. The gateway with peer A; the site configured towards the gateway.
	apply(gwNode, gatewayConfig(peerA))
	apply(siteNode, siteConfig(siteKeyRef, "203.0.113.1/28", rwg.Peer{
		Name: "gateway", PublicKey: gwPub, AllowedIPs: pfx("100.64.7.0/24"),
		Endpoint: "198.51.100.2:51820", PresharedKey: &pskRef,
	}))
	// Idempotent: a second Apply of the same bundle changes nothing.
	apply(gwNode, gatewayConfig(peerA))
	if changed, err := gwNode.Changed(); err != nil || !changed {
		t.Fatalf("Changes after Apply: %v, %v", changed, err)
	}
	s := waitState(t, gwNode, "site-a", 5*time.Second, func(s agent.PeerState) error {
		if s.State != agent.StateDown { // no endpoint, no keepalive: the gateway waits
			return fmt.Errorf("state %s", s.State)
		}
		return nil
	})
	transcript = append(transcript, fmt.Sprint(s))
	s = waitState(t, siteNode, "gateway", 5*time.Second, func(s agent.PeerState) error {
		if s.State != agent.StateConnecting { // endpoint configured: the site initiates
			return fmt.Errorf("state %s", s.State)
		}
		return nil
	})
	transcript = append(transcript, fmt.Sprint(s))
	if routes := ourRoutes(t, gw, gwNode.Interface); strings.Join(routes, ",") != "203.0.113.0/28" {
		t.Fatalf("gateway routes through %s: %v, want [203.0.113.0/28]", gwNode.Interface, routes)
	}
	if out := gw.MustRun("ip", "-o", "addr", "show", "dev", gwNode.Interface); !strings.Contains(out, "100.64.7.1/24") {
		t.Fatalf("gateway device address: %s", out)
	}
	if out := gw.MustRun("ip", "-o", "link", "show", "dev", gwNode.Interface); !strings.Contains(out, "mtu 1420") || !strings.Contains(out, ",UP") {
		t.Fatalf("gateway device link: %s", out)
	}
	if changed, err := gwNode.Changed(); err != nil || changed {
		t.Fatalf("Changes signalled without a change: %v, %v", changed, err)
	}

	// 2. Traffic through the tunnel: the handshake completes, both sides report Established
	// with bytes counted, and the gateway's poll signals the change.
	if err := netns.Eventually(10*time.Second, func() error { return ping(site, "100.64.7.1") }); err != nil {
		t.Fatal(err)
	}
	a0 := waitState(t, gwNode, "site-a", 5*time.Second, established)
	transcript = append(transcript, fmt.Sprint(a0))
	transcript = append(transcript, fmt.Sprint(waitState(t, siteNode, "gateway", 5*time.Second, established)))
	if a0.PacketsIn != 0 || a0.PacketsOut != 0 {
		t.Errorf("WireGuard counts no packets, got %d/%d", a0.PacketsIn, a0.PacketsOut)
	}
	if err := netns.Eventually(5*time.Second, func() error {
		changed, err := gwNode.Changed()
		if err == nil && !changed {
			err = errors.New("no change signalled after the handshake")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	// 3. Adding peer B while A streams pings: A loses nothing, its session and counters go on.
	// -W 10: ping waits that long for the last reply, so a reply a starved userspace device
	// delivers late (make test compiles beside it on two cores) is counted, not lost.
	pinger := site.Start("ping", "-n", "-c", "250", "-i", "0.02", "-W", "10", "100.64.7.1")
	if err := netns.Eventually(10*time.Second, func() error {
		if !strings.Contains(pinger.Output(), "bytes from") {
			return fmt.Errorf("no reply yet: %s", pinger.Output())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	before := waitState(t, gwNode, "site-a", 5*time.Second, established)
	devBefore := devicePeer(t, gwNode, siteKey.PublicKey())
	apply(gwNode, gatewayConfig(peerA, peerB))
	if pinger.Exited() {
		t.Fatalf("the ping ended before the Apply: %s", pinger.Output())
	}
	apply(site2Node, siteConfig(site2KeyRef, "203.0.113.17/28", rwg.Peer{
		Name: "gateway", PublicKey: gwPub, AllowedIPs: pfx("100.64.7.0/24"),
		Endpoint: "192.0.2.2:51820", PersistentKeepalive: 1, // initiates without traffic
	}))
	transcript = append(transcript, fmt.Sprint(waitState(t, gwNode, "site-b", 10*time.Second, func(s agent.PeerState) error {
		if s.State != agent.StateEstablished {
			return fmt.Errorf("state %s (%s)", s.State, s.Message)
		}
		return nil
	})))
	if err := ping(site2, "100.64.7.1"); err != nil {
		t.Fatal(err)
	}
	after := waitState(t, gwNode, "site-a", 5*time.Second, func(s agent.PeerState) error {
		if s.BytesIn <= before.BytesIn || s.BytesOut <= before.BytesOut {
			return fmt.Errorf("counters did not grow: in %d -> %d, out %d -> %d", before.BytesIn, s.BytesIn, before.BytesOut, s.BytesOut)
		}
		return established(s)
	})
	if after.LastHandshake.Before(before.LastHandshake) || !after.EstablishedAt.Equal(before.EstablishedAt) {
		t.Errorf("peer A's session was reset by adding peer B: handshake %s -> %s, established %s -> %s",
			before.LastHandshake, after.LastHandshake, before.EstablishedAt, after.EstablishedAt)
	}
	devAfter := devicePeer(t, gwNode, siteKey.PublicKey())
	// (Never print a wgtypes.Peer: it holds the pre-shared key.)
	if devBefore == nil || devAfter == nil {
		t.Fatal("peer A is not on the device")
	}
	if devAfter.ReceiveBytes <= devBefore.ReceiveBytes || devAfter.TransmitBytes <= devBefore.TransmitBytes || devAfter.LastHandshakeTime.Before(devBefore.LastHandshakeTime) {
		t.Errorf("peer A on the device was reset: rx %d -> %d, tx %d -> %d, handshake %s -> %s",
			devBefore.ReceiveBytes, devAfter.ReceiveBytes, devBefore.TransmitBytes, devAfter.TransmitBytes,
			devBefore.LastHandshakeTime, devAfter.LastHandshakeTime)
	}
	if routes := ourRoutes(t, gw, gwNode.Interface); strings.Join(routes, ",") != "203.0.113.0/28,203.0.113.16/28,203.0.113.64/27" {
		t.Errorf("gateway routes with peers A and B: %v", routes)
	}
	if err := netns.Eventually(20*time.Second, func() error {
		if !pinger.Exited() {
			return errors.New("ping still running")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	m := pingSummary.FindStringSubmatch(pinger.Output())
	if m == nil || m[1] != "250" || m[2] != "250" {
		t.Fatalf("ping through peer A across the Apply lost packets:\n%s", pinger.Output())
	}

	// 4. A peer whose pre-shared key Secret is missing is left out and reported; the others
	// are untouched.
	apply(gwNode, gatewayConfig(peerA, peerB, peerC))
	c, err := peerState(gwNode, "site-c")
	if err != nil {
		t.Fatal(err)
	}
	transcript = append(transcript, fmt.Sprint(c))
	if c.State != agent.StateMissingSecret || !strings.Contains(c.Message, missingRef.Name) || c.Connected() {
		t.Errorf("peer with a missing pre-shared key: %+v", c)
	}
	if devicePeer(t, gwNode, cKey.PublicKey()) != nil {
		t.Error("the peer with a missing pre-shared key was configured on the device")
	}
	if slices.Contains(ourRoutes(t, gw, gwNode.Interface), "203.0.113.32/28") {
		t.Error("the peer with a missing pre-shared key got a route")
	}

	// 5. Removing peers B and C: B's config and routes go; A carries on.
	apply(gwNode, gatewayConfig(peerA))
	if devicePeer(t, gwNode, site2Key.PublicKey()) != nil {
		t.Error("removed peer B is still on the device")
	}
	if routes := ourRoutes(t, gw, gwNode.Interface); strings.Join(routes, ",") != "203.0.113.0/28" {
		t.Errorf("gateway routes after removing B: %v", routes)
	}
	peers, err := gwNode.Peers()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := peers["site-b"]; ok || len(peers) != 1 {
		t.Errorf("peers after removing B and C: %v", peers)
	}
	if err := ping(site2, "100.64.7.1"); err == nil {
		t.Error("removed peer B still reaches the gateway")
	}
	if err := ping(site, "100.64.7.1"); err != nil {
		t.Error(err)
	}
	final := waitState(t, gwNode, "site-a", 5*time.Second, established)
	if !final.EstablishedAt.Equal(before.EstablishedAt) {
		t.Errorf("peer A's session was reset along the way: established %s -> %s", before.EstablishedAt, final.EstablishedAt)
	}

	// 6. The site's device crashes and comes back (a new helper, same interface name): the
	// tunnel is re-established without touching the gateway.
	siteSpec := siteConfig(siteKeyRef, "203.0.113.1/28", rwg.Peer{
		Name: "gateway", PublicKey: gwPub, AllowedIPs: pfx("100.64.7.0/24"),
		Endpoint: "198.51.100.2:51820", PresharedKey: &pskRef,
	})
	siteNode.Kill()
	restarted := wgtest.Start(t, site, wgtest.Options{InterfaceName: siteNode.Interface})
	nodes = append(nodes, restarted)
	apply(restarted, siteSpec)
	if err := netns.Eventually(10*time.Second, func() error { return ping(site, "100.64.7.1") }); err != nil {
		t.Fatal(err)
	}
	waitState(t, gwNode, "site-a", 5*time.Second, func(s agent.PeerState) error {
		if !s.LastHandshake.After(final.LastHandshake) {
			return errors.New("no new handshake")
		}
		return established(s)
	})

	// The scan covers the device's own log, not just the driver's.
	for _, want := range []string{"UAPI: Updating private key", "UAPI: Updating preshared key", "handshake"} {
		if !strings.Contains(gwNode.Log()+siteNode.Log(), want) {
			t.Errorf("the captured log has no %q: the key scan would miss the device log", want)
		}
	}
}

// TestMissingPrivateKey: without the private key Secret, Apply fails naming the Secret, with no
// key material, and configures nothing; a malformed key is not echoed either.
func TestMissingPrivateKey(t *testing.T) {
	netns.Skip(t)
	run := netns.NewRun(t, nsPrefix)
	gw := run.NS("gw")
	node := wgtest.Start(t, gw, wgtest.Options{})
	siteKey, psk := wgtest.NewKey(t), wgtest.NewKey(t)
	cfg := gatewayConfig(rwg.Peer{Name: "site-a", PublicKey: siteKey.PublicKey().String(), AllowedIPs: pfx("203.0.113.0/28"), PresharedKey: &pskRef})

	err := node.Apply(cfg, wgtest.Secrets{pskRef: []byte(psk.String())})
	if err == nil {
		t.Fatal("Apply without the private key succeeded")
	}
	if !strings.Contains(err.Error(), `"`+gwKeyRef.Name+`"`) || !strings.Contains(err.Error(), gwKeyRef.Key) {
		t.Errorf("error does not name the Secret: %v", err)
	}
	if found := wgtest.FindKeys(err.Error()+node.Log(), map[string]wgtypes.Key{"pre-shared key": psk}); len(found) > 0 {
		t.Errorf("key material in the error or log: %v", found)
	}

	// A value that is not a key: an error naming the Secret, without the value.
	const notAKey = "c2VjcmV0LXRoYXQtaXMtbm90LWEta2V5"
	err = node.Apply(cfg, wgtest.Secrets{gwKeyRef: []byte(notAKey), pskRef: []byte(psk.String())})
	if err == nil || !strings.Contains(err.Error(), gwKeyRef.Name) || strings.Contains(err.Error(), notAKey) {
		t.Errorf("malformed private key: %v", err)
	}

	dev, derr := node.Device()
	if derr != nil {
		t.Fatal(derr)
	}
	if dev.PrivateKey != (wgtypes.Key{}) || dev.ListenPort == 51820 || len(dev.Peers) != 0 {
		t.Errorf("a failed Apply configured the device: key set %v, port %d, %d peers", dev.PrivateKey != (wgtypes.Key{}), dev.ListenPort, len(dev.Peers))
	}
	if out := gw.MustRun("ip", "-o", "addr", "show", "dev", node.Interface); strings.Contains(out, "100.64.7.1") {
		t.Errorf("a failed Apply set the address: %s", out)
	}
	if peers, err := node.Peers(); err != nil || len(peers) != 0 {
		t.Errorf("peers after failed Applies: %v, %v", peers, err)
	}

	// With the key it applies.
	gwKey := wgtest.NewKey(t)
	if err := node.Apply(cfg, wgtest.Secrets{gwKeyRef: []byte(gwKey.String()), pskRef: []byte(psk.String())}); err != nil {
		t.Fatal(err)
	}
	// (Never print a wgtypes.Device: it holds the private key.)
	if dev, err := node.Device(); err != nil {
		t.Fatal(err)
	} else if dev.PublicKey != gwKey.PublicKey() || len(dev.Peers) != 1 {
		t.Fatalf("device after Apply: public key %s (want %s), %d peers", dev.PublicKey, gwKey.PublicKey(), len(dev.Peers))
	}
	if found := wgtest.FindKeys(node.Log(), map[string]wgtypes.Key{"private key": gwKey, "pre-shared key": psk}); len(found) > 0 {
		t.Errorf("key material in the log: %v", found)
	}
}

// TestModes: kernel mode fails clearly where the module is missing (as here) and works where it
// is present; auto mode always yields a working device.
func TestModes(t *testing.T) {
	netns.Skip(t)
	run := netns.NewRun(t, nsPrefix)
	ns := run.NS("modes")
	node, err := wgtest.StartE(t, ns, wgtest.Options{Mode: wireguard.ModeKernel})
	switch {
	case err != nil:
		if !strings.Contains(err.Error(), "kernel WireGuard is not available") {
			t.Errorf("kernel mode without the module: %v", err)
		}
		t.Logf("kernel mode: %v", err)
	case node.Mode != wireguard.ModeKernel:
		t.Errorf("kernel mode runs %s", node.Mode)
	default:
		node.Stop()
	}
	auto := wgtest.Start(t, ns, wgtest.Options{})
	if auto.Mode != wireguard.ModeKernel && auto.Mode != wireguard.ModeUserspace {
		t.Errorf("auto mode runs %q", auto.Mode)
	}
	t.Logf("auto mode runs %s", auto.Mode)
	// The device goes away when the helper stops (DeleteOnClose).
	auto.Stop()
	if err := netns.Eventually(5*time.Second, func() error {
		if out, err := ns.Run("ip", "link", "show", "dev", auto.Interface); err == nil {
			return fmt.Errorf("device still there: %s", out)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}
