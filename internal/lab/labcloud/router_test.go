package labcloud_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/gophercloud/gophercloud/v2"
	gopenstack "github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/openstack"
	"github.com/bnerd/bnerd-vpn-operator/internal/lab/labcloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/neutronfake"
)

const (
	password     = "lab-cloud-test-password"
	providerCIDR = "198.51.100.0/24"
	clientAddr   = "100.64.7.2"
)

// labCloud is the lab's cloud in a test: the fake served on a listener (as cmd/lab-cloud
// does), a user, the external and provider networks, and the admin API.
type labCloud struct {
	*neutronfake.Server
	extNet, provNet, provSubnet string
}

func newLabCloud(t *testing.T) *labCloud {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &labCloud{Server: neutronfake.Serve(l, "")}
	t.Cleanup(c.Close)
	c.AddUser("vpn-operator", password)
	c.extNet, _ = c.AddNetwork("public", true, "203.0.113.0/24")
	c.provNet, c.provSubnet = c.AddNetwork("provider", false, providerCIDR)
	return c
}

func (c *labCloud) cloudsYAML() []byte {
	return fmt.Appendf(nil, "clouds:\n  lab:\n    auth:\n      auth_url: %s\n      username: vpn-operator\n      password: '%s'\n      project_name: vpn\n      user_domain_name: Default\n      project_domain_name: Default\n    region_name: RegionOne\n    interface: public\n", c.AuthURL(), password)
}

// provider is the operator's OpenStack provider against the lab cloud.
func (c *labCloud) provider(t *testing.T, mut ...func(*openstack.Config)) *openstack.Provider {
	t.Helper()
	cfg := openstack.Config{NetworkID: c.provNet, CallTimeout: 2 * time.Second, CacheTTL: -1}
	for _, m := range mut {
		m(&cfg)
	}
	p, err := openstack.NewFromCloudsYAML(c.cloudsYAML(), "lab", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// onVeth configures the provider for newTopology, whose provider link is a plain veth to the
// port's namespace (p0, the NAD's master): no switch and no port security there, so the port
// is attached with the macvlan binding (BindingNone). The trunk binding on the lab's switch is
// switch_test.go's.
func onVeth(cfg *openstack.Config) { cfg.NADMaster = "p0"; cfg.PortBinding = openstack.BindingNone }

// network is a gophercloud Neutron client, as the cloud's user has one.
func (c *labCloud) network(t *testing.T) *gophercloud.ServiceClient {
	t.Helper()
	pc, err := gopenstack.AuthenticatedClient(context.Background(), gophercloud.AuthOptions{
		IdentityEndpoint: c.AuthURL(), Username: "vpn-operator", Password: password, DomainName: "Default",
		Scope: &gophercloud.AuthScope{ProjectName: "vpn", DomainName: "Default"},
	})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := gopenstack.NewNetworkV2(pc, gophercloud.EndpointOpts{Region: "RegionOne"})
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// ensureReady calls Ensure until the endpoint is ready (the provider converges over calls).
func ensureReady(t *testing.T, p *openstack.Provider, req cloud.Request) cloud.Result {
	t.Helper()
	var res cloud.Result
	err := netns.Eventually(30*time.Second, func() error {
		var err error
		res, err = p.Ensure(context.Background(), req)
		if err == nil && !res.Ready {
			err = fmt.Errorf("not ready: %s: %s", res.Reason, res.Message)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func gatewayRequest() cloud.Request {
	return cloud.Request{Namespace: "tenant-a", Name: "edge", UID: "0b7d1c1e-5a4e-4a43-9d6f-2f4a4f1f0001",
		Protocol: model.ProtocolIPsec, Endpoint: model.Endpoint{Kind: model.EndpointFloatingIPPool, FloatingIPPool: "public"}}
}

// topology is client — router — provider ("port": the stand-in for the port's namespace), the
// router programmed by the lab cloud's L3 agent until the test ends.
type topology struct {
	run                  *netns.Run
	client, router, port *netns.NS
	r                    *labcloud.Router
}

func newTopology(t *testing.T, c *labCloud) *topology {
	t.Helper()
	netns.Skip(t, "nft", "socat")
	run := netns.NewRun(t, "lcr")
	tp := &topology{run: run, client: run.NS("client"), router: run.NS("router"), port: run.NS("port")}
	netns.VethAddr(tp.client, "c0", clientAddr+"/30", tp.router, "client", "100.64.7.1/30")
	netns.Veth(tp.router, "provider", tp.port, "p0")
	tp.client.MustRun("ip", "route", "add", "203.0.113.0/24", "via", "100.64.7.1")
	tp.r = &labcloud.Router{Netns: tp.router.Name, Links: labcloud.Links{Client: "client", Provider: "provider"}, Log: testr.New(t)}
	if err := tp.r.Setup(netip.MustParsePrefix("198.51.100.1/24")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); tp.r.Run(ctx, c.Server, 200*time.Millisecond) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return tp
}

// plugPort gives the port's namespace the port's MAC and fixed IP on p0 (what the NAD does in
// the cluster), with the provider gateway as its default route.
func (tp *topology) plugPort(att *cloud.NetworkAttachment) {
	tp.port.MustRun("ip", "link", "set", "p0", "address", att.MAC)
	tp.port.MustRun("ip", "addr", "add", att.FixedIP+"/24", "dev", "p0")
	tp.port.MustRun("ip", "route", "add", "default", "via", "198.51.100.1")
}

// echo serves proto/port on addr in ns, answering each datagram or connection with tag and the
// address the sender appeared as.
func echo(ns *netns.NS, proto, addr string, port int, tag string) {
	listen := fmt.Sprintf("%s4-LISTEN:%d,bind=%s,fork,reuseaddr", strings.ToUpper(proto), port, addr)
	ns.Start("socat", "-T2", listen, "SYSTEM:echo "+tag+"-$SOCAT_PEERADDR")
}

// ask sends one request from ns and returns the answer ("" when none came within a second).
func ask(ns *netns.NS, proto, addr string, port int) string {
	target := fmt.Sprintf("%s4:%s:%d", strings.ToUpper(proto), addr, port)
	if proto == "tcp" {
		target += ",connect-timeout=1"
	}
	out, _, _ := ns.Exec("ping\n", "socat", "-T1", "-", target)
	return strings.TrimSpace(out)
}

func expectAnswer(t *testing.T, ns *netns.NS, proto, addr string, port int, want string) {
	t.Helper()
	var got string
	if err := netns.Eventually(15*time.Second, func() error {
		if got = ask(ns, proto, addr, port); got != want {
			return fmt.Errorf("%s %s:%d answered %q, want %q", proto, addr, port, got, want)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %s:%d -> %q", proto, addr, port, got)
}

func expectSilence(t *testing.T, ns *netns.NS, proto, addr string, port int) {
	t.Helper()
	if err := netns.Eventually(15*time.Second, func() error {
		if got := ask(ns, proto, addr, port); got != "" {
			return fmt.Errorf("%s %s:%d still answers %q", proto, addr, port, got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %s:%d -> no answer", proto, addr, port)
}

func (tp *topology) table(t *testing.T) string {
	t.Helper()
	return tp.router.MustRun("nft", "list", "table", "ip", labcloud.Table)
}

// The lab cloud's router carries a floating IP's traffic to its port and back, filtered by the
// port's security group, from what the operator's provider created through the API: a packet
// to the floating IP reaches the fixed IP (the client's own address as its source), the port's
// own packets leave as the floating IP, a security group without UDP 500 really blocks IKE (and
// the operator's next Ensure restores it), and deleting the floating IP removes its NAT.
func TestRouterCarriesFloatingIPTraffic(t *testing.T) {
	c := newLabCloud(t)
	tp := newTopology(t, c)
	p := c.provider(t)
	req := gatewayRequest()
	res := ensureReady(t, p, req)
	t.Cleanup(func() { _ = p.Delete(context.Background(), req) })
	att := res.Pod.NetworkAttachment
	fip := res.PublicAddress
	t.Logf("port %s mac %s fixed %s floating %s", att.PortID, att.MAC, att.FixedIP, fip)
	tp.plugPort(att)

	// TCP is not in the gateway's group: a rule the cloud's user adds opens it.
	sc := c.network(t)
	var group string
	for _, port := range c.PortList() {
		if port.ID == att.PortID {
			group = port.SecurityGroups[0]
		}
	}
	if _, err := rules.Create(context.Background(), sc, rules.CreateOpts{Direction: rules.DirIngress, EtherType: rules.EtherType4,
		SecGroupID: group, Protocol: rules.ProtocolTCP, PortRangeMin: 443, PortRangeMax: 443, RemoteIPPrefix: "0.0.0.0/0"}).Extract(); err != nil {
		t.Fatal(err)
	}

	echo(tp.port, "udp", att.FixedIP, 500, "ike")
	echo(tp.port, "udp", att.FixedIP, 4500, "natt")
	echo(tp.port, "tcp", att.FixedIP, 443, "tcp")
	echo(tp.port, "tcp", att.FixedIP, 22, "ssh")
	echo(tp.client, "udp", clientAddr, 7000, "site")

	expectAnswer(t, tp.client, "udp", fip, 500, "ike-"+clientAddr)
	expectAnswer(t, tp.client, "udp", fip, 4500, "natt-"+clientAddr)
	expectAnswer(t, tp.client, "tcp", fip, 443, "tcp-"+clientAddr)
	expectSilence(t, tp.client, "tcp", fip, 22) // no rule admits it
	expectAnswer(t, tp.port, "udp", clientAddr, 7000, "site-"+fip)
	if got := ask(tp.client, "udp", att.FixedIP, 500); got != "" {
		t.Fatalf("the fixed IP is reachable from the client side: %q", got)
	}

	// Removing UDP 500 from the group blocks IKE at the router; NAT-T still passes.
	var ike500 string
	for _, r := range c.RuleList(group) {
		if r.Protocol != nil && *r.Protocol == "udp" && r.PortRangeMin != nil && *r.PortRangeMin == 500 {
			ike500 = r.ID
		}
	}
	if ike500 == "" {
		t.Fatalf("the gateway's group has no UDP 500 rule: %+v", c.RuleList(group))
	}
	if err := rules.Delete(context.Background(), sc, ike500).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	expectSilence(t, tp.client, "udp", fip, 500)
	expectAnswer(t, tp.client, "udp", fip, 4500, "natt-"+clientAddr)
	if tbl := tp.table(t); strings.Contains(tbl, "udp dport 500") {
		t.Fatalf("the router still admits UDP 500:\n%s", tbl)
	}

	// The operator's next Ensure restores the rule; the router follows.
	ensureReady(t, p, req)
	expectAnswer(t, tp.client, "udp", fip, 500, "ike-"+clientAddr)

	// Deleting the floating IP removes its NAT.
	f, ok := c.FloatingIPByAddress(fip)
	if !ok {
		t.Fatalf("no floating IP %s", fip)
	}
	if err := floatingips.Delete(context.Background(), sc, f.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	expectSilence(t, tp.client, "udp", fip, 4500)
	if err := netns.Eventually(10*time.Second, func() error {
		if tbl := tp.table(t); strings.Contains(tbl, fip) {
			return fmt.Errorf("the router still translates %s:\n%s", fip, tbl)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
