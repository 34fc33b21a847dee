package strongswan

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/mdlayher/arp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/availability"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/charontest"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testenv"
)

var (
	envOnce sync.Once
	env     *testenv.Env
	envErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		_ = env.Stop()
	}
	os.Exit(code)
}

func startEnv(t *testing.T) *testenv.Env {
	t.Helper()
	if testing.Short() {
		t.Skip("envtest: not in -short")
	}
	envOnce.Do(func() { env, envErr = testenv.Start() })
	if envErr != nil {
		t.Fatal(envErr)
	}
	return env
}

// The node network of the host-network tests: two nodes and a site on one bridge (a
// namespace of its own), the gateway's VIP among the nodes' addresses.
const (
	lanPrefix = 24
	vipAddr   = "198.51.100.10"
	siteAddr  = "198.51.100.2"
)

// The failover goals: a handover moves the tunnels within a second (2 s here, for loaded
// machines); a lost node is found when the Lease expires (2 s) and the active answered no
// probe for 1 s, the tunnel follows at once (5 s here).
const (
	handoverGoal = 2 * time.Second
	nodeLostGoal = 5 * time.Second
)

var nodeAddrs = []string{"198.51.100.11", "198.51.100.12"}

// hostNode is one node of the pair: its namespace (the host network the gateway pod shares),
// its charon and driver, its agent's Elector with the VIP and the scoped fence.
type hostNode struct {
	name   string
	addr   string
	ns     *charontest.Netns
	charon *charontest.Charon
	driver *Driver
	vip    *availability.VIP
	fence  *availability.Fence
	el     *availability.Elector
	srv    *http.Server
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	probe  string // the agent's probe address (its own loopback address in the test's namespace)
	port   int
}

// kill ends the agent as a lost node does: no renewals, no answers.
func (n *hostNode) kill() {
	n.once.Do(func() {
		_ = n.srv.Close()
		n.cancel()
		<-n.done
	})
}

// stop ends the agent as SIGTERM does: it hands over when active.
func (n *hostNode) stop() {
	n.once.Do(func() {
		n.cancel()
		<-n.done
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.el.Shutdown(ctx)
		_ = n.srv.Close()
	})
}

func (n *hostNode) mac(t *testing.T) net.HardwareAddr {
	t.Helper()
	out := n.ns.MustRun("cat", "/sys/class/net/eth0/address")
	hw, err := net.ParseMAC(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	return hw
}

func (n *hostNode) holdsVIP(t *testing.T) bool {
	t.Helper()
	held, err := n.vip.Held()
	if err != nil {
		t.Fatal(err)
	}
	return held
}

// vipFixture is the bridge, the two nodes and the site.
type vipFixture struct {
	t       *testing.T
	run     *charontest.Run
	lan     *charontest.Netns
	nodes   []*hostNode
	site    *site
	secrets *secrets
	cs      kubernetes.Interface
	cfgEnv  *testenv.Env
	lease   string
	port    int
	bundle  *render.Bundle
}

func newVIPFixture(t *testing.T) *vipFixture {
	charontest.Skip(t, "nft")
	e := startEnv(t)
	f := &vipFixture{t: t, run: charontest.NewRun(t), secrets: &secrets{data: map[model.SecretKeyRef][]byte{}}, cfgEnv: e}
	f.cs = kubernetes.NewForConfigOrDie(e.Config)
	f.lan = f.run.Netns("lan")
	f.lan.MustRun("ip", "link", "add", "br0", "type", "bridge")
	f.lan.MustRun("ip", "link", "set", "br0", "up")
	attach := func(ns *charontest.Netns, port, addr string) {
		netns.Veth(ns, "eth0", f.lan, port)
		ns.MustRun("ip", "addr", "add", addr+"/"+strconv.Itoa(lanPrefix), "dev", "eth0")
		f.lan.MustRun("ip", "link", "set", port, "master", "br0")
	}
	// The site: its charon is configured like the site's device, toward the VIP.
	psk := randomPSK(t)
	s := &site{
		name: "site-a", id: "site-a.example.test", addr: siteAddr, gwAddr: vipAddr, subnet: "203.0.113.0/28", host: "203.0.113.1",
		psk: psk, secret: model.SecretKeyRef{Name: "site-a-psk", Key: "psk"}, ikeProp: ikeProposal, rekey: time.Hour, start: "start",
	}
	s.ns = f.run.Netns("site")
	attach(s.ns, "p-site", siteAddr)
	s.ns.AddLoopback(s.host + "/32")
	s.charon = charontest.Start(t, s.ns, "site", charontest.Config{})
	f.site = s
	f.secrets.set(s.secret, psk)
	f.bundle = vipBundle(t, s)

	// The Lease, as the operator creates it.
	f.lease = fmt.Sprintf("hn-%d-gateway-active", time.Now().UnixNano()%1_000_000)
	d := int32(2)
	if _, err := f.cs.CoordinationV1().Leases("default").Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: f.lease, Namespace: "default"},
		Spec:       coordinationv1.LeaseSpec{LeaseDurationSeconds: &d},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.port = freeProbePort(t)
	for i, addr := range nodeAddrs {
		name := fmt.Sprintf("node-%c", 'a'+i)
		n := &hostNode{name: name, addr: addr, probe: fmt.Sprintf("127.0.0.%d", 2+i), port: f.port}
		n.ns = f.run.Netns(name)
		attach(n.ns, "p-"+name, addr)
		n.ns.AddLoopback(gwService + "/32")
		n.charon = charontest.Start(t, n.ns, name, charontest.Config{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		drv, err := New(ctx, n.charon.URI(), Options{})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = drv.Close() })
		n.driver = drv
		n.vip = &availability.VIP{Address: netip.MustParseAddr(vipAddr), Netns: "/run/netns/" + n.ns.Name}
		n.fence = &availability.Fence{NFT: n.ns.Wrapper(t, "nft"), Scope: netip.MustParseAddr(vipAddr)}
		f.nodes = append(f.nodes, n)
	}
	return f
}

// vipBundle renders the host-network gateway with the VIP on two nodes, the site its peer.
func vipBundle(t *testing.T, s *site) *render.Bundle {
	t.Helper()
	gw := &model.Gateway{
		Namespace: "tenant-a", Name: "acme", UID: "0d6c3f6e-5a1e-4c55-9d43-0c3c9e1c1a02", Generation: 1,
		Protocol: model.ProtocolIPsec, Mode: model.ModeSNAT,
		Endpoint: model.Endpoint{Kind: model.EndpointHostNetwork, NodeNames: []string{"node-a", "node-b"},
			HostAddress: netip.MustParseAddr(vipAddr)},
		PublicAddress: vipAddr, Standby: true,
		ServiceCIDR:  netip.MustParsePrefix(serviceCIDR),
		LocalAddress: netip.MustParseAddr(gwService),
		IPsec: &model.IPsecGateway{
			IKEVersion: 2, IKEProposals: []string{ikeProposal}, LocalID: gwLocalID,
			DPDDelay: time.Second, DPDAction: "restart", RekeyTime: 4 * time.Hour,
		},
		Peers: []model.Peer{s.peer()},
	}
	b, err := render.Render(gw, render.Options{UserspaceDataplane: true})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func freeProbePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startAgent starts n's agent side as the gateway agent does: the Elector's first role (the
// fence and the VIP), the configuration applied, then the decisions.
func (f *vipFixture) startAgent(n *hostNode, pod string) {
	t := f.t
	t.Helper()
	n.once = sync.Once{}
	n.done = make(chan struct{})
	log := funcr.New(func(prefix, args string) {
		t.Logf("%s %s: %s %s", time.Now().Format("15:04:05.000"), pod, prefix, args)
	}, funcr.Options{})
	n.vip.Log = log
	n.el = &availability.Elector{
		Leases: f.cs.CoordinationV1(), Namespace: "default", Lease: f.lease, Gateway: "acme",
		Identity: pod, Address: n.probe, ProbePort: n.port,
		Fence: n.fence, Announcer: n.vip,
		Dataplane: func() any { return n.driver },
		Healthy:   func(ctx context.Context) bool { return n.driver.Alive(ctx) == nil },
		Log:       log,
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(n.probe, strconv.Itoa(n.port)))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/availability", n.el)
	n.srv = &http.Server{Handler: mux, ReadHeaderTimeout: time.Second}
	go func() { _ = n.srv.Serve(ln) }()
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	if err := n.el.Start(ctx); err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithTimeout(context.Background(), time.Minute)
	defer acancel()
	if err := n.driver.Apply(actx, f.bundle, f.secrets); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(n.done)
		_ = n.el.Run(ctx)
	}()
	t.Cleanup(func() {
		n.kill()
		n.vip.Close()
	})
}

// active waits for exactly one active agent and returns it and the other.
func (f *vipFixture) active(timeout time.Duration) (*hostNode, *hostNode) {
	f.t.Helper()
	var a, b *hostNode
	err := charontest.Eventually(timeout, func() error {
		x, y := f.nodes[0], f.nodes[1]
		switch {
		case x.el.IsActive() && !y.el.IsActive():
			a, b = x, y
		case y.el.IsActive() && !x.el.IsActive():
			a, b = y, x
		default:
			return fmt.Errorf("active: %s %v, %s %v", x.name, x.el.IsActive(), y.name, y.el.IsActive())
		}
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return a, b
}

// tunnelUp waits until the site reaches the gateway's service address through the tunnel,
// and says how long that took.
func (f *vipFixture) tunnelUp(timeout time.Duration) time.Duration {
	f.t.Helper()
	start := time.Now()
	err := charontest.Eventually(timeout, func() error {
		res, err := f.site.ns.Ping(f.site.host, gwService, 1, 100*time.Millisecond, 200*time.Millisecond)
		if err != nil {
			return err
		}
		if res.Received == 0 {
			return errors.New("no echo reply through the tunnel")
		}
		return nil
	})
	if err != nil {
		f.t.Fatalf("the site's tunnel through the VIP: %v", err)
	}
	return time.Since(start)
}

// arpReplies sends an ARP request for the VIP from the site and collects the hardware
// addresses that answer within wait.
func (f *vipFixture) arpReplies(wait time.Duration) map[string]bool {
	f.t.Helper()
	got := map[string]bool{}
	err := netns.Do(f.site.ns.Name, func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		c, err := arp.Dial(ifi)
		if err != nil {
			return err
		}
		defer c.Close()
		if err := c.Request(netip.MustParseAddr(vipAddr)); err != nil {
			return err
		}
		deadline := time.Now().Add(wait)
		_ = c.SetReadDeadline(deadline)
		for time.Now().Before(deadline) {
			p, _, err := c.Read()
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					return nil
				}
				return err
			}
			if p.Operation == arp.OperationReply && p.SenderIP == netip.MustParseAddr(vipAddr) {
				got[p.SenderHardwareAddr.String()] = true
			}
		}
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return got
}

// established is the number of established IKE_SAs of n's charon.
func established(t *testing.T, n *hostNode) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sas, err := n.driver.listSAs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	up := 0
	for _, list := range sas {
		for _, sa := range list {
			if sa.up() {
				up++
			}
		}
	}
	return up
}

// checkPair checks the pair at rest: the VIP on the active's node only, the ARP answers for
// it from that node only, no IKE_SA on the standby, the site's peer established on the active.
func (f *vipFixture) checkPair(active, standby *hostNode) {
	t := f.t
	t.Helper()
	if !active.holdsVIP(t) || standby.holdsVIP(t) {
		t.Fatalf("VIP held: active %s %v, standby %s %v", active.name, active.holdsVIP(t), standby.name, standby.holdsVIP(t))
	}
	replies := f.arpReplies(500 * time.Millisecond)
	if !replies[active.mac(t).String()] || replies[standby.mac(t).String()] || len(replies) != 1 {
		t.Fatalf("ARP answers for the VIP %v: want only the active %s (%s), never the standby %s (%s)",
			replies, active.name, active.mac(t), standby.name, standby.mac(t))
	}
	if n := established(t, standby); n != 0 {
		t.Fatalf("the standby %s has %d established IKE_SAs", standby.name, n)
	}
	ps, err := active.driver.Peers(context.Background())
	if err != nil || ps[f.site.name].State != agent.StateEstablished {
		t.Fatalf("the active's peer: %+v (%v)", ps[f.site.name], err)
	}
}

// TestHostNetworkVIPFailover: a host-network IPsec gateway with a standby on two nodes of one
// bridge. The active's agent holds the VIP; the site's tunnel, configured toward the VIP,
// reaches it. A handover (the active stopped) and a lost node (the active's agent and link
// gone) each move the VIP to the other node, announced by gratuitous ARP, and the site's
// tunnel is re-established through the VIP; the outage is measured and printed. The standby
// never answers for the VIP, and its fence, scoped to the VIP, lets the node's own IKE pass.
func TestHostNetworkVIPFailover(t *testing.T) {
	f := newVIPFixture(t)
	f.site.load(t)
	f.startAgent(f.nodes[0], "pod-a")
	f.startAgent(f.nodes[1], "pod-b")
	active, standby := f.active(10 * time.Second)
	t.Logf("initial: %s active, tunnel up after %s", active.name, f.tunnelUp(20*time.Second).Round(time.Millisecond))
	f.checkPair(active, standby)
	f.checkNodeTraffic(standby)

	// Handover: the active pod is stopped (a rollout, a drain).
	start := time.Now()
	active.stop()
	a2, s2 := f.active(5 * time.Second)
	if a2 != standby {
		t.Fatalf("after the handover %s is active, want %s", a2.name, standby.name)
	}
	took := time.Since(start)
	up := f.tunnelUp(10 * time.Second)
	if took+up > handoverGoal {
		t.Errorf("handover: the tunnel was down %s, the goal is %s", took+up, handoverGoal)
	}
	t.Logf("handover: %s active %s after the stop; the site's tunnel through the VIP up %s after the stop",
		a2.name, took.Round(time.Millisecond), (took + up).Round(time.Millisecond))
	if s2.holdsVIP(t) {
		t.Fatalf("the stopped %s still holds the VIP", s2.name)
	}
	f.siteNeighbour(a2)
	// A new pod on the stopped one's node.
	f.startAgent(s2, "pod-c")
	time.Sleep(time.Second)
	a3, s3 := f.active(5 * time.Second)
	if a3 != a2 {
		t.Fatalf("a new standby took over: %s active", a3.name)
	}
	waitStandbyReady(t, a3)
	f.checkPair(a3, s3)

	// The active's node is lost: its agent stops answering, its link goes down (with the VIP
	// still on it).
	start = time.Now()
	a3.kill()
	a3.ns.MustRun("ip", "link", "set", "eth0", "down")
	a4 := s3
	if err := charontest.Eventually(10*time.Second, func() error {
		if !a4.el.IsActive() {
			return fmt.Errorf("%s is not active", a4.name)
		}
		return nil
	}); err != nil {
		t.Fatalf("after the node loss: %v", err)
	}
	took = time.Since(start)
	up = f.tunnelUp(15 * time.Second)
	if took+up > nodeLostGoal {
		t.Errorf("node lost: the tunnel was down %s, the goal is %s", took+up, nodeLostGoal)
	}
	t.Logf("node lost: %s active %s after the loss; the site's tunnel through the VIP up %s after the loss",
		a4.name, took.Round(time.Millisecond), (took + up).Round(time.Millisecond))
	if !a4.holdsVIP(t) {
		t.Fatalf("the new active %s does not hold the VIP", a4.name)
	}
	f.siteNeighbour(a4)
}

// siteNeighbour checks that the site's neighbour entry for the VIP names n's node: the
// gratuitous ARP moved it (a re-resolution of a stale entry would take seconds).
func (f *vipFixture) siteNeighbour(n *hostNode) {
	f.t.Helper()
	out := f.site.ns.MustRun("ip", "neigh", "show", vipAddr, "dev", "eth0")
	if !strings.Contains(out, n.mac(f.t).String()) {
		f.t.Fatalf("the site's neighbour entry for the VIP: %q, want %s's %s", out, n.name, n.mac(f.t))
	}
}

func waitStandbyReady(t *testing.T, n *hostNode) {
	t.Helper()
	if err := charontest.Eventually(5*time.Second, func() error {
		if !n.el.StandbyReady() {
			return errors.New("no standby probed the active")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// checkNodeTraffic: on the standby's node, with its fence in place, IKE to and from the
// node's own address (the node's own IKE, another gateway on the node) passes both ways; the
// same packets to and from the VIP's address would be dropped.
func (f *vipFixture) checkNodeTraffic(standby *hostNode) {
	t := f.t
	t.Helper()
	if !standby.fence.Installed() {
		t.Fatalf("the standby %s is not fenced", standby.name)
	}
	// Counters after the fence (its chains run at priority filter - 20).
	script := `table inet hn_count {
	counter in_ike {}
	counter out_ike {}
	chain input { type filter hook input priority filter - 10; policy accept;
		ip saddr ` + siteAddr + ` ip daddr ` + standby.addr + ` udp dport 500 counter name in_ike
	}
	chain output { type filter hook output priority filter - 10; policy accept;
		ip saddr ` + standby.addr + ` ip daddr ` + siteAddr + ` udp dport 500 counter name out_ike
	}
}
`
	if out, err := standby.ns.RunInput(script, "nft", "-f", "-"); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	// The site sends to the node's own address; the node sends from it.
	send := func(ns *charontest.Netns, from, to string) {
		err := netns.Do(ns.Name, func() error {
			c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(from)}, &net.UDPAddr{IP: net.ParseIP(to), Port: 500})
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte("not IKE"))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	send(f.site.ns, siteAddr, standby.addr)
	send(standby.ns, standby.addr, siteAddr)
	count := func(name string) string {
		out := standby.ns.MustRun("nft", "list", "counter", "inet", "hn_count", name)
		return out
	}
	for _, c := range []string{"in_ike", "out_ike"} {
		if out := count(c); strings.Contains(out, "packets 0 ") {
			t.Fatalf("the node's own IKE (%s) did not pass the standby's fence:\n%s\n%s", c, out,
				standby.ns.MustRun("nft", "list", "table", "inet", availability.FenceTable))
		}
	}
	standby.ns.MustRun("nft", "delete", "table", "inet", "hn_count")
}
