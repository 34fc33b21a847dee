package nft

import (
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen/modelgen"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// The lab of TestRealPackets. No real tunnel: a veth named like the tunnel interface links the
// gateway to a router namespace behind which the peers live, so the peers' packets arrive on
// "ipsec0" with their own addresses, as decrypted tunnel traffic would. The peers' subnets in
// the model (/28, /29, /27) differ in length, so every lookup by prefix length is exercised.
//
//	peer-a 203.0.113.2/28  ─┐
//	peer-b 203.0.113.18/28 ─┼─ tun ── ipsec0 [gw] eth0 ── backend 192.0.2.10 ── internal 198.51.100.10
//	peer-c 203.0.113.34/28 ─┘       100.64.7.1   192.0.2.1   (cluster router)
const (
	labTunnel  = LibipsecInterface
	labCluster = "eth0"
	gwCluster  = "192.0.2.1"
	backendIP  = "192.0.2.10"
	internalIP = "198.51.100.10"
	// otherTenantIP is inside internalSourceCIDRs but not a reverse client: a pod of another
	// namespace.
	otherTenantIP = "198.51.100.11"
	peerAIP       = "203.0.113.2"
	peerBIP       = "203.0.113.18"
	peerCIP       = "203.0.113.34"
	vipWeb        = "100.64.7.10" // web tcp/80 and dns udp/53: peer-a only
	vipAdmin      = "100.64.7.11" // admin tcp/80: peer-b only
	vipPLC        = "100.64.7.20" // reverse exposure into peer-a
)

func labGateway() *model.Gateway {
	g := ipsecGateway("lab", []model.Peer{
		ipsecPeer("peer-a", modelgen.Authorized(), []string{"dns", "web"}, "203.0.113.0/28"),
		// three prefix lengths: each is looked up in sets of its own, by rules of its own
		ipsecPeer("peer-b", modelgen.Authorized(), []string{"admin"}, "203.0.113.16/29"),
		ipsecPeer("peer-c", modelgen.Dark(model.ReasonNoGrants, ""), nil, "203.0.113.32/27"),
	}, []model.Exposure{
		{Name: "web", VirtualIP: addr(vipWeb), Target: addr(backendIP), Ports: []model.Port{tcp(80, 8080)}, GrantedTo: []string{"peer-a"}},
		{Name: "dns", VirtualIP: addr(vipWeb), Target: addr(backendIP), Ports: []model.Port{udp(53, 5353)}, GrantedTo: []string{"peer-a"}},
		{Name: "admin", VirtualIP: addr(vipAdmin), Target: addr(backendIP), Ports: []model.Port{tcp(80, 8081)}, GrantedTo: []string{"peer-b"}},
	})
	g.Peers[0].ReverseExposures = []string{"plc"}
	g.InternalSourceCIDRs = []netip.Prefix{pfx("198.51.100.0/24")}
	g.ReverseClients = []netip.Addr{addr(internalIP)}
	g.ReverseExposures = []model.ReverseExposure{{
		Name: "plc", VirtualIP: addr(vipPLC), Target: addr(peerAIP), Grantee: "peer-a",
		Ports: []model.Port{
			{Protocol: "tcp", Port: 502, TargetPort: 2222, GatewayPort: 20000},
			{Protocol: "udp", Port: 161, TargetPort: 2223, GatewayPort: 20001},
		},
	}}
	return g
}

type lab struct {
	gw, tun, peerA, peerB, peerC, backend, internal, otherTenant *netns.NS
}

func newLab(t *testing.T, ruleset string) *lab {
	t.Helper()
	run := netns.NewRun(t, "bnftp")
	l := &lab{
		gw: run.NS("gw"), tun: run.NS("tun"), peerA: run.NS("peer-a"), peerB: run.NS("peer-b"), peerC: run.NS("peer-c"),
		backend: run.NS("backend"), internal: run.NS("internal"), otherTenant: run.NS("other"),
	}
	// The ruleset first: fail-closed, as the agent does it.
	if out, err := l.gw.RunInput(ruleset, "nft", "-f", "-"); err != nil {
		t.Fatalf("load ruleset: %v\n%s", err, out)
	}

	// Tunnel side.
	netns.Veth(l.gw, labTunnel, l.tun, "togw")
	l.gw.MustRun("ip", "addr", "add", "100.64.7.1/32", "dev", labTunnel)
	l.tun.MustRun("ip", "addr", "add", "100.64.250.1/32", "dev", "togw")
	l.gw.MustRun("ip", "route", "add", "203.0.113.0/24", "via", "100.64.250.1", "dev", labTunnel, "onlink")
	l.tun.MustRun("ip", "route", "add", "default", "via", "100.64.7.1", "dev", "togw", "onlink")
	l.tun.Sysctl("net.ipv4.ip_forward", "1")
	for _, p := range []struct {
		ns       *netns.NS
		link     string
		router   string
		hostCIDR string
	}{
		{l.peerA, "pa", "203.0.113.1", peerAIP + "/28"},
		{l.peerB, "pb", "203.0.113.17", peerBIP + "/28"},
		{l.peerC, "pc", "203.0.113.33", peerCIP + "/28"},
	} {
		netns.Veth(l.tun, p.link, p.ns, "eth0")
		l.tun.MustRun("ip", "addr", "add", p.router+"/28", "dev", p.link)
		p.ns.MustRun("ip", "addr", "add", p.hostCIDR, "dev", "eth0")
		p.ns.MustRun("ip", "route", "add", "default", "via", p.router)
	}

	// Cluster side: the backend doubles as the cluster's router toward the internal client.
	netns.Veth(l.gw, labCluster, l.backend, "togw")
	l.gw.MustRun("ip", "addr", "add", gwCluster+"/24", "dev", labCluster)
	l.backend.MustRun("ip", "addr", "add", backendIP+"/24", "dev", "togw")
	l.gw.MustRun("ip", "route", "add", "default", "via", backendIP)
	l.backend.MustRun("ip", "route", "add", "203.0.113.0/24", "via", gwCluster)
	netns.Veth(l.backend, "toin", l.internal, "eth0")
	l.backend.MustRun("ip", "addr", "add", "198.51.100.1/24", "dev", "toin")
	l.internal.MustRun("ip", "addr", "add", internalIP+"/24", "dev", "eth0")
	l.internal.MustRun("ip", "route", "add", "default", "via", "198.51.100.1")
	netns.Veth(l.backend, "toother", l.otherTenant, "eth0")
	l.backend.MustRun("ip", "addr", "add", "198.51.100.1/32", "dev", "toother")
	l.backend.MustRun("ip", "route", "add", otherTenantIP+"/32", "dev", "toother")
	l.otherTenant.MustRun("ip", "addr", "add", otherTenantIP+"/32", "dev", "eth0")
	l.otherTenant.MustRun("ip", "route", "add", "default", "via", "198.51.100.1", "dev", "eth0", "onlink")
	l.backend.Sysctl("net.ipv4.ip_forward", "1")
	l.gw.Sysctl("net.ipv4.ip_forward", "1")

	// Listeners answer with their name and the source address they saw.
	l.backend.Start("socat", "TCP-LISTEN:8080,fork,reuseaddr", "SYSTEM:echo web $SOCAT_PEERADDR")
	l.backend.Start("socat", "UDP-RECVFROM:5353,fork", "SYSTEM:echo dns $SOCAT_PEERADDR")
	l.backend.Start("socat", "TCP-LISTEN:8081,fork,reuseaddr", "SYSTEM:echo admin $SOCAT_PEERADDR")
	l.peerA.Start("socat", "TCP-LISTEN:2222,fork,reuseaddr", "SYSTEM:echo plc $SOCAT_PEERADDR")
	l.peerA.Start("socat", "UDP-RECVFROM:2223,fork", "SYSTEM:echo plcudp $SOCAT_PEERADDR")
	return l
}

// tcpAsk connects and returns what the server said (error when it could not connect in time).
func tcpAsk(ns *netns.NS, host string, port int) (string, error) {
	out, _, err := ns.Exec("", "socat", "-t", "3", "-T", "3", "-", fmt.Sprintf("TCP:%s:%d,connect-timeout=1", host, port))
	return strings.TrimSpace(out), err
}

// udpAsk sends one datagram and returns the answer, if any arrived within a second.
func udpAsk(ns *netns.NS, host string, port int) (string, error) {
	out, _, err := ns.Exec("?\n", "socat", "-t", "1", "-T", "1", "-", fmt.Sprintf("UDP:%s:%d", host, port))
	return strings.TrimSpace(out), err
}

// expectAnswer polls until the service answers exactly want (listeners start asynchronously).
func expectAnswer(t *testing.T, ask func(*netns.NS, string, int) (string, error), ns *netns.NS, host string, port int, want string) {
	t.Helper()
	err := netns.Eventually(15*time.Second, func() error {
		got, err := ask(ns, host, port)
		if got != want {
			return fmt.Errorf("got %q (%v), want %q", got, err, want)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s -> %s:%d: %v", ns.Name, host, port, err)
	}
}

// expectNoAnswer makes one attempt (the services are known to be up) and requires silence.
func expectNoAnswer(t *testing.T, ask func(*netns.NS, string, int) (string, error), ns *netns.NS, host string, port int) {
	t.Helper()
	if got, _ := ask(ns, host, port); got != "" {
		t.Fatalf("%s -> %s:%d answered %q; want it dropped", ns.Name, host, port, got)
	}
}

// counters are the named counters and the drops sets' elements (DropName), by name.
func (l *lab) counters(t *testing.T) map[string]CounterValue {
	t.Helper()
	list := []byte(l.gw.MustRun("nft", "-j", "list", "table", Family, Table))
	c, err := ParseCounters(list)
	if err != nil {
		t.Fatal(err)
	}
	drops, err := ParseDrops(list)
	if err != nil {
		t.Fatal(err)
	}
	maps.Copy(c, drops)
	return c
}

// sum is what the named counters or elements have counted together.
func sum(c map[string]CounterValue, names []string) uint64 {
	var n uint64
	for _, name := range names {
		n += c[name].Packets
	}
	return n
}

// expectCounter polls until the counters or elements named have counted at least min packets.
func (l *lab) expectCounter(t *testing.T, names []string, min uint64) {
	t.Helper()
	var last map[string]CounterValue
	err := netns.Eventually(5*time.Second, func() error {
		last = l.counters(t)
		if n := sum(last, names); n < min {
			return fmt.Errorf("%v counted %d packets, want >= %d", names, n, min)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v; all counters: %+v", err, last)
	}
}

func (l *lab) expectZero(t *testing.T, lists ...[]string) {
	t.Helper()
	c := l.counters(t)
	for _, names := range lists {
		if n := sum(c, names); n != 0 {
			t.Errorf("%v counted %d packets, want 0", names, n)
		}
	}
}

// peerDrops are the elements counting the drops of g's peers, by name.
func peerDrops(t *testing.T, g *model.Gateway) map[string]PeerDrops {
	t.Helper()
	d, err := DropCounters(g)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRealPackets loads the rendered ruleset into a gateway namespace and checks with real
// TCP and UDP packets who reaches what, and which peer's counter counts the denials.
func TestRealPackets(t *testing.T) {
	netns.Skip(t, "nft", "socat")
	g := labGateway()
	o := libipsec(g)
	ruleset := mustRender(t, g, o)
	l := newLab(t, ruleset)
	drops := peerDrops(t, g)
	a, b, c := drops["peer-a"], drops["peer-b"], drops["peer-c"]

	t.Run("granted peer reaches its exposures over TCP and UDP, seen from the gateway's address", func(t *testing.T) {
		expectAnswer(t, tcpAsk, l.peerA, vipWeb, 80, "web "+gwCluster)
		expectAnswer(t, udpAsk, l.peerA, vipWeb, 53, "dns "+gwCluster)
		expectAnswer(t, tcpAsk, l.peerB, vipAdmin, 80, "admin "+gwCluster)
		l.expectZero(t, a.In, b.In, c.In)
	})

	t.Run("ungranted peer is dropped and counted on its own counter", func(t *testing.T) {
		expectNoAnswer(t, tcpAsk, l.peerB, vipWeb, 80)
		expectNoAnswer(t, udpAsk, l.peerB, vipWeb, 53)
		l.expectCounter(t, b.In, 2)
		l.expectZero(t, a.In, c.In)
		expectNoAnswer(t, tcpAsk, l.peerA, vipAdmin, 80)
		l.expectCounter(t, a.In, 1)
	})

	t.Run("dark peer reaches nothing", func(t *testing.T) {
		expectNoAnswer(t, tcpAsk, l.peerC, vipWeb, 80)
		expectNoAnswer(t, udpAsk, l.peerC, vipWeb, 53)
		expectNoAnswer(t, tcpAsk, l.peerC, vipAdmin, 80)
		expectNoAnswer(t, tcpAsk, l.peerC, backendIP, 8080)  // the target itself, untranslated
		expectNoAnswer(t, tcpAsk, l.peerC, "100.64.7.1", 22) // the gateway's own address
		l.expectCounter(t, c.In, 5)
	})

	// The grant class passes between two lookups in the conntrack mark. A mark some other
	// table of the namespace set before (on the node, another component's) must not stand in
	// for one: from a source in no peer's subnets, peer-a's class is no grant to peer-a's web.
	t.Run("a conntrack mark set before the ruleset's is no grant", func(t *testing.T) {
		p, err := newPlan(g, o)
		if err != nil {
			t.Fatal(err)
		}
		if p.peerNames[0] != "peer-a" || p.peerClass[0] == noClass {
			t.Fatalf("peer-a's class: %v %v", p.peerNames, p.peerClass)
		}
		const stray = "203.0.113.26" // on peer-b's link, outside peer-b's /29
		l.peerB.MustRun("ip", "addr", "add", stray+"/28", "dev", "eth0")
		if out, err := l.gw.RunInput("table ip foreign {\n\tchain pre {\n\t\ttype filter hook prerouting priority mangle; policy accept;\n"+
			"\t\tip saddr "+stray+" ct mark set "+classID(p.peerClass[0])+"\n\t}\n}\n", "nft", "-f", "-"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		t.Cleanup(func() { l.gw.MustRun("nft", "delete", "table", "ip", "foreign") })
		before := l.counters(t)[CounterUnknownIn].Packets
		out, _, err := l.peerB.Exec("", "socat", "-t", "1", "-T", "1", "-", fmt.Sprintf("TCP:%s:80,connect-timeout=1,bind=%s", vipWeb, stray))
		if got := strings.TrimSpace(out); got != "" || err == nil {
			t.Fatalf("%s reached web with peer-a's class in its conntrack mark: %q", stray, got)
		}
		l.expectCounter(t, []string{CounterUnknownIn}, before+1)
		expectAnswer(t, tcpAsk, l.peerA, vipWeb, 80, "web "+gwCluster) // peer-a itself still does
	})

	t.Run("reverse exposure from an internal source reaches the grantee, from the virtual IP", func(t *testing.T) {
		expectAnswer(t, tcpAsk, l.internal, gwCluster, 20000, "plc "+vipPLC)
		expectAnswer(t, udpAsk, l.internal, gwCluster, 20001, "plcudp "+vipPLC)
	})

	t.Run("reverse exposure refuses a source outside internalSourceCIDRs", func(t *testing.T) {
		expectNoAnswer(t, tcpAsk, l.backend, gwCluster, 20000)
		expectNoAnswer(t, udpAsk, l.backend, gwCluster, 20001)
	})

	t.Run("reverse exposure refuses another tenant's pod inside internalSourceCIDRs", func(t *testing.T) {
		expectAnswer(t, tcpAsk, l.otherTenant, backendIP, 8080, "web "+otherTenantIP) // it is routed
		expectNoAnswer(t, tcpAsk, l.otherTenant, gwCluster, 20000)
		expectNoAnswer(t, udpAsk, l.otherTenant, gwCluster, 20001)
	})

	t.Run("traffic toward a peer that is not a reverse exposure is dropped and counted", func(t *testing.T) {
		before := sum(l.counters(t), a.Out)
		expectNoAnswer(t, tcpAsk, l.internal, peerAIP, 2222)
		l.expectCounter(t, a.Out, before+1)
		l.expectZero(t, b.Out, c.Out)
	})

	t.Run("replacing the ruleset is atomic and keeps granted flows working", func(t *testing.T) {
		if out, err := l.gw.RunInput(ruleset, "nft", "-f", "-"); err != nil {
			t.Fatalf("reload: %v\n%s", err, out)
		}
		l.expectZero(t, a.In, b.In, c.In) // a new table: counters start again
		expectAnswer(t, tcpAsk, l.peerA, vipWeb, 80, "web "+gwCluster)
		expectNoAnswer(t, tcpAsk, l.peerB, vipWeb, 80)
		l.expectCounter(t, b.In, 1)
	})

	t.Run("revoking a grant closes the exposure for new connections", func(t *testing.T) {
		g := labGateway()
		g.Exposures[0].GrantedTo = nil
		g.Peers[0].Exposures = []string{"dns"}
		if out, err := l.gw.RunInput(mustRender(t, g, o), "nft", "-f", "-"); err != nil {
			t.Fatalf("reload: %v\n%s", err, out)
		}
		expectNoAnswer(t, tcpAsk, l.peerA, vipWeb, 80)
		l.expectCounter(t, a.In, 1)
		expectAnswer(t, udpAsk, l.peerA, vipWeb, 53, "dns "+gwCluster)
	})
}
