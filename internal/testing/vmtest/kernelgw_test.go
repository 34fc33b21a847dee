package vmtest_test

// The gateway in kernel mode, end to end inside the VM: the real gateway agent binary (files
// source: the model the operator would put in the ConfigMap, the Secrets as mounted files)
// renders and applies the ruleset and drives charon (kernel-netlink: real XFRM SAs and
// policies, no kernel-libipsec) over VICI, or the kernel WireGuard device. Client sites are
// strongSwan daemons and kernel WireGuard devices in namespaces of their own. The gateways
// are host-network gateways: each one's namespace stands for its node.

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/charontest"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/vmtest"
)

// EnvAgent is the gateway agent binary the host built for the guest (TestVM sets it).
const EnvAgent = "BNERD_VMTEST_AGENT"

// kernelPlugins: the sites' charon load list, kernel ESP (no kernel-libipsec), trimmed for TCG.
var kernelPlugins = []string{
	"random", "nonce", "openssl", "aes", "sha1", "sha2", "hmac", "gcm", "pem", "pkcs1", "x509",
	"kdf", "pubkey", "gmp", "kernel-netlink", "socket-default", "vici", "updown",
}

// Addresses. The IPsec gateway's node: public 198.51.100.1 on a point-to-point link to each
// site, 198.51.100.129/25 toward the LAN (its cluster side, internal sources). The WireGuard
// gateway's node: public 192.0.2.33, 192.0.2.129/25 toward the LAN. A foreign IPsec user (a
// CNI's node-to-node encryption) between the IPsec node and namespace cni: 192.0.2.1 <->
// 192.0.2.2, its inner ranges 192.0.2.64/27 and 192.0.2.96/27, reqid 1.
var (
	ipsecPublic = netip.MustParseAddr("198.51.100.1")
	backend     = netip.MustParseAddr("198.51.100.130")
	wgPublic    = netip.MustParseAddr("192.0.2.33")
	wgBackend   = netip.MustParseAddr("192.0.2.130")
)

const (
	webPort, dnsPort, revPort = 8080, 8081, 9000
	siteReqid                 = 7 // the sites' own CHILD_SA reqid (their device's choice)
)

func ports(specs ...vpnv1.PortSpec) []intstr.IntOrString { return vpnv1.Ports(specs...) }

// imageKernelPlugins is the gateway image's charon load list as its strongswan-kernel.conf has
// it: hack/lab/image/strongswan.conf without kernel-libipsec (hack/lab/build-images.sh).
func imageKernelPlugins(t *testing.T) []string {
	root, err := vmtest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	conf, err := os.ReadFile(filepath.Join(root, "hack/lab/image/strongswan.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(conf), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "load = "); ok {
			var out []string
			for _, p := range strings.Fields(rest) {
				if p != "kernel-libipsec" {
					out = append(out, p)
				}
			}
			t.Logf("gateway charon: the image's plugins without kernel-libipsec: %s", strings.Join(out, " "))
			return out
		}
	}
	t.Fatal("no load line in the image's strongswan.conf")
	return nil
}

type ipsecSite struct {
	name   string
	ns     *netns.NS
	ext    netip.Addr
	subnet netip.Prefix
	addr   netip.Addr
	psk    string
	charon *charontest.Charon
	// perSubnet, when set, are the site's subnets, each negotiated as a CHILD_SA of its own
	// (the way FortiGate, PAN-OS and MikroTik configure phase 2), with the site's reqid
	// siteReqid+i; otherwise subnet is one CHILD_SA with siteReqid.
	perSubnet []netip.Prefix
}

// kernelGW is the IPsec gateway's node with its agent.
type kernelGW struct {
	t        *testing.T
	run      *charontest.Run
	node     *netns.NS
	lan      *netns.NS
	charon   *charontest.Charon
	agentBin string
	cfgDir   string
	secDir   string
	agent    *netns.Process
	in       model.Input
	m        *model.Gateway
	sites    map[string]*ipsecSite
	backend  *echo
}

func agentBinary(t *testing.T) string {
	bin := os.Getenv(EnvAgent)
	if bin == "" {
		t.Fatalf("%s is not set (TestVM builds the agent)", EnvAgent)
	}
	return bin
}

func newKernelGW(t *testing.T) *kernelGW {
	g := &kernelGW{t: t, agentBin: agentBinary(t), sites: map[string]*ipsecSite{}}
	g.run = charontest.NewRun(t)
	g.node = netns.Open(t, g.run.Netns("gw").Name)
	g.lan = netns.Open(t, g.run.Netns("lan").Name)
	netns.VethAddr(g.node, "eth0", "198.51.100.129/25", g.lan, "eth0", backend.String()+"/25")
	g.node.Sysctl("net.ipv4.ip_forward", "1")
	g.backend = startEcho(t, g.lan, netip.AddrPortFrom(backend, webPort).String())
	startEcho(t, g.lan, netip.AddrPortFrom(backend, dnsPort).String())
	// Counts what reaches the backend's UDP service (the exposure "dns").
	if out, err := g.lan.RunInput("table inet probe {\n counter dns_in {}\n chain in {\n  type filter hook input priority 0; policy accept;\n  udp dport "+strconv.Itoa(dnsPort)+" counter name dns_in\n }\n}\n", "nft", "-f", "-"); err != nil {
		t.Fatalf("lan probe: %v: %s", err, out)
	}

	dir := t.TempDir()
	g.cfgDir, g.secDir = filepath.Join(dir, "config"), filepath.Join(dir, "secrets")
	for _, d := range []string{g.cfgDir, g.secDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	dpd := metav1.Duration{Duration: time.Second}
	gw := &vpnv1.VPNGateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "gw", UID: "gw-uid", Generation: 1},
		Spec: vpnv1.VPNGatewaySpec{
			Protocol: vpnv1.ProtocolIPsec,
			Endpoint: vpnv1.Endpoint{HostNetwork: &vpnv1.HostNetworkEndpoint{NodeName: "node-1", Address: ipsecPublic.String()}},
			Exposures: []vpnv1.Exposure{
				{Name: "web", Target: vpnv1.ExposureTarget{Address: backend.String(), Ports: ports(vpnv1.PortSpec{Port: 80, TargetPort: webPort})}},
				{Name: "dns", Target: vpnv1.ExposureTarget{Address: backend.String(), Ports: ports(vpnv1.PortSpec{Port: 53, TargetPort: dnsPort, Protocol: vpnv1.PortProtocolUDP})}},
			},
			ReverseExposures: []vpnv1.ReverseExposure{
				{Name: "b-app", Target: vpnv1.ReverseExposureTarget{Address: "203.0.113.17", Ports: ports(vpnv1.PortSpec{Port: revPort})}},
			},
			IPsec: &vpnv1.IPsecGatewaySettings{IKE: vpnv1.IKESettings{DPD: &vpnv1.DPDSettings{Delay: &dpd}}},
		},
	}
	g.in = model.Input{
		Gateway: gw,
		Config: model.Config{PoolCIDR: model.DefaultPoolCIDR,
			InternalSourceCIDRs: []netip.Prefix{netip.MustParsePrefix("198.51.100.128/25")}},
		ServiceCIDR:    netip.MustParsePrefix("100.64.7.0/24"),
		PublicAddress:  ipsecPublic.String(),
		ReverseClients: []netip.Addr{backend},
	}
	return g
}

// addSite creates a site's namespace, link and PSK, and its VPNPeer (not yet written).
func (g *kernelGW) addSite(name string, i int, exposures, reverse []string) *ipsecSite {
	s := &ipsecSite{
		name:   name,
		ext:    netip.AddrFrom4([4]byte{198, 51, 100, byte(2 + i)}),
		subnet: netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(16 * i)}), 28),
		addr:   netip.AddrFrom4([4]byte{203, 0, 113, byte(16*i + 1)}),
		psk:    "vm-psk-" + name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36),
	}
	s.ns = netns.Open(g.t, g.run.Netns("s"+strconv.Itoa(i)).Name)
	ifname := "ext" + strconv.Itoa(i)
	netns.Veth(g.node, ifname, s.ns, "ext0")
	g.node.MustRun("ip", "addr", "add", ipsecPublic.String()+"/32", "peer", s.ext.String()+"/32", "dev", ifname)
	s.ns.MustRun("ip", "addr", "add", s.ext.String()+"/32", "peer", ipsecPublic.String()+"/32", "dev", "ext0")
	s.ns.AddLoopback(s.addr.String() + "/32")
	g.writeSecret(name+"-psk", "psk", s.psk)
	g.in.Peers = append(g.in.Peers, vpnv1.VPNPeer{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: name, UID: types.UID("uid-" + name), Generation: 1,
			CreationTimestamp: metav1.NewTime(time.Unix(int64(1000+i), 0))},
		Spec: vpnv1.VPNPeerSpec{GatewayRef: "gw",
			Authorization: &vpnv1.Authorization{Exposures: exposures, ReverseExposures: reverse},
			IPsec: &vpnv1.IPsecPeer{
				Peer:          vpnv1.IPsecRemote{Address: s.ext.String(), ID: name + ".example.com"},
				RemoteSubnets: []string{s.subnet.String()},
				PSKSecretRef:  vpnv1.SecretKeyRef{Name: name + "-psk", Key: "psk"},
			}},
	})
	g.sites[name] = s
	return s
}

func (g *kernelGW) writeSecret(name, key, value string) {
	d := filepath.Join(g.secDir, name)
	if err := os.MkdirAll(d, 0o700); err != nil {
		g.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, key), []byte(value), 0o600); err != nil {
		g.t.Fatal(err)
	}
}

// publish builds the model as the operator does and writes it as the ConfigMap's data (one
// rename: the agent never reads half a file).
func (g *kernelGW) publish() {
	g.t.Helper()
	m, errs := model.Build(g.in)
	if errs != nil {
		g.t.Fatalf("model: %v", errs)
	}
	g.m = m
	writeModel(g.t, g.cfgDir, m)
}

func writeModel(t testing.TB, dir string, m *model.Gateway) {
	t.Helper()
	b, err := render.Render(m, render.Options{})
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	data, err := b.ConfigMapData()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range data {
		tmp := filepath.Join(dir, "."+k+".tmp")
		if err := os.WriteFile(tmp, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, k)); err != nil {
			t.Fatal(err)
		}
	}
}

func (g *kernelGW) peer(name string) model.Peer {
	for _, p := range g.m.Peers {
		if p.Name == name {
			return p
		}
	}
	g.t.Fatalf("no peer %s in the model", name)
	return model.Peer{}
}

func (g *kernelGW) vip(exposure string) netip.Addr {
	for _, e := range g.m.Exposures {
		if e.Name == exposure {
			return e.VirtualIP
		}
	}
	g.t.Fatalf("no exposure %s", exposure)
	return netip.Addr{}
}

// startCharon starts the gateway's charon as the image runs it in kernel mode: its plugins
// without kernel-libipsec, its routes consulted only for the ruleset's marked flows.
// imageRetransmits gives it charon's own retransmission timing (4 s, 1.8, 5 tries), as the
// image has it, instead of charontest's quick one (a dead peer found in seconds).
func (g *kernelGW) startCharon(imageRetransmits ...bool) {
	g.t.Helper()
	conf := charontest.Config{Plugins: imageKernelPlugins(g.t),
		Extra: fmt.Sprintf("plugins {\n    kernel-netlink {\n      fwmark = %#x/%#x\n    }\n  }", nft.RouteMark, nft.RouteMark)}
	if len(imageRetransmits) > 0 && imageRetransmits[0] {
		conf.RetransmitTimeout, conf.RetransmitBase, conf.RetransmitTries = 4, 1.8, 5
	}
	g.charon = charontest.Start(g.t, g.node, "gw", conf)
}

// spoofThrough sends 5 datagrams from spoof (an address of the site's outside the peer's
// networks) to dst through the site's SA with reqid siteReqid (a policy of higher priority
// than the site's own), and returns how many the ruleset counted as spoofed.
func (g *kernelGW) spoofThrough(ns *netns.NS, ext, spoof netip.Addr, siteReqid, dst string) int {
	g.t.Helper()
	ns.AddLoopback(spoof.String() + "/32")
	ns.MustRun("ip", "xfrm", "policy", "add", "src", spoof.String()+"/32", "dst", g.m.ServiceCIDR.String(), "dir", "out", "priority", "1",
		"tmpl", "src", ext.String(), "dst", ipsecPublic.String(), "proto", "esp", "reqid", siteReqid, "mode", "tunnel")
	s0 := g.counter(nft.CounterSpoofed)
	sendUDP(g.t, ns, spoof, dst, 5)
	var s1 int
	_ = netns.Eventually(5*time.Second, func() error {
		if s1 = g.counter(nft.CounterSpoofed); s1-s0 < 5 {
			return fmt.Errorf("%d counted", s1-s0)
		}
		return nil
	})
	return s1 - s0
}

// startAgent runs `gateway-agent init` (ruleset, startup gate, forwarding) the first time, then
// `gateway-agent run` in kernel mode (no --userspace-dataplane), and waits until it has loaded
// the peers into charon and opened the gate.
func (g *kernelGW) startAgent(first bool) {
	g.t.Helper()
	if first {
		g.node.MustRun(g.agentBin, "init", "--config-dir", g.cfgDir)
		g.t.Logf("gateway-agent init: ruleset and startup gate installed in the node's namespace")
	}
	g.agent = g.node.Start(g.agentBin, "run", "--config-dir", g.cfgDir, "--secrets-dir", g.secDir,
		"--vici-socket", g.charon.URI(), "--metrics-addr", "", "--ruleset-check-interval", "500ms", "--teardown-wait", "5s")
	waitUntil(g.t, "agent applied the configuration", 60*time.Second, func() error {
		if g.agent.Exited() {
			g.t.Fatalf("agent exited:\n%s", g.agent.Output())
		}
		if !strings.Contains(g.agent.Output(), `"configuration applied"`) {
			return fmt.Errorf("the agent has not applied its configuration yet")
		}
		if _, err := g.node.Run("nft", "list", "table", "ip", nft.GateTable); err == nil {
			return fmt.Errorf("startup gate still closed")
		}
		out, err := g.charon.Swanctl("--list-conns")
		if err != nil {
			return err
		}
		for _, p := range g.m.Peers {
			if p.IPsec != nil && p.HasTunnel() && !strings.Contains(out, p.Name+":") {
				return fmt.Errorf("connection %s not loaded:\n%s", p.Name, out)
			}
		}
		return nil
	})
}

func siteSwanctlConf(s *ipsecSite, serviceCIDR netip.Prefix) string {
	return `connections {
  gw {
    version = 2
    local_addrs = ` + s.ext.String() + `
    remote_addrs = ` + ipsecPublic.String() + `
    proposals = aes256gcm16-prfsha256-ecp256
    dpd_delay = 1s
    mobike = no
    local { auth = psk
            id = ` + s.name + `.example.com }
    remote { auth = psk
             id = ` + ipsecPublic.String() + ` }
    children {
` + siteChildren(s, serviceCIDR) + `    }
  }
}
secrets {
  ike-gw {
    id-1 = ` + s.name + `.example.com
    id-2 = ` + ipsecPublic.String() + `
    secret = "` + s.psk + `"
  }
}
`
}

// siteChildren are the site's swanctl children: one for its subnet, or one per subnet.
func siteChildren(s *ipsecSite, serviceCIDR netip.Prefix) string {
	subnets := s.perSubnet
	if len(subnets) == 0 {
		subnets = []netip.Prefix{s.subnet}
	}
	var b strings.Builder
	for i, sub := range subnets {
		fmt.Fprintf(&b, `      net%d {
        local_ts = %s
        remote_ts = %s
        esp_proposals = aes256gcm16-ecp256
        start_action = start
        dpd_action = restart
        reqid = %d
      }
`, i, sub, serviceCIDR, siteReqid+i)
	}
	return b.String()
}

// connect starts the site's strongSwan (kernel ESP) and waits until its SA is in the node's
// kernel with the peer's reqid from the model.
func (g *kernelGW) connect(s *ipsecSite) {
	g.t.Helper()
	s.charon = charontest.Start(g.t, s.ns, s.name, charontest.Config{Plugins: kernelPlugins})
	if err := s.charon.LoadSwanctlConf(siteSwanctlConf(s, g.m.ServiceCIDR)); err != nil {
		g.t.Fatal(err)
	}
	reqid := g.peer(s.name).IPsec.Reqid
	waitUntil(g.t, "site "+s.name+" SA in the gateway's kernel", 60*time.Second, func() error {
		out := g.node.MustRun("ip", "xfrm", "state")
		if n := strings.Count(out, fmt.Sprintf("reqid %d ", reqid)); n < 2 {
			return fmt.Errorf("%d kernel SAs with reqid %d", n, reqid)
		}
		return nil
	})
}

func (g *kernelGW) counter(name string) int {
	return nftCounter(g.t, g.node, "ip", nft.Table, name)
}

// drops is how many packets from the peer's subnets the ruleset dropped.
func (g *kernelGW) drops(peer string) int { return peerDropsIn(g.t, g.node, g.m, peer) }

// TestGuestKernelForcedEncapsulation: spec.ipsec.forceEncapsulation and spec.ipsec.mtu on the
// kernel dataplane, no NAT between the site and the gateway: the kernel's SAs are ESP in UDP
// (encap espinudp, port 4500) although nothing translates, the site (its configuration
// unchanged) reaches its exposure, and the ruleset clamps TCP's MSS to the MTU less 40.
func TestGuestKernelForcedEncapsulation(t *testing.T) {
	vmtest.SkipUnlessGuest(t)
	charontest.Skip(t, "nft")
	g := newKernelGW(t)
	a := g.addSite("a", 0, []string{"web"}, nil)
	g.in.Gateway.Spec.IPsec.ForceEncapsulation = true
	g.in.Gateway.Spec.IPsec.MTU = 1300
	g.publish()
	g.startCharon()
	g.startAgent(true)
	g.connect(a)
	states := g.node.MustRun("ip", "xfrm", "state")
	if !strings.Contains(states, "encap type espinudp sport 4500 dport 4500") {
		t.Fatalf("the kernel's SAs are not ESP in UDP on port 4500:\n%s", states)
	}
	web := netip.AddrPortFrom(g.vip("web"), 80).String()
	if err := request(a.ns, "tcp", a.addr, web, 5*time.Second); err != nil {
		t.Fatalf("site a -> %s through the UDP-encapsulated tunnel: %v", web, err)
	}
	if ruleset := g.node.MustRun("nft", "list", "table", "ip", nft.Table); !strings.Contains(ruleset, "maxseg size set 1260") {
		t.Errorf("the ruleset does not clamp TCP's MSS to 1260:\n%s", ruleset)
	}
	t.Logf("forced encapsulation without a NAT: kernel SAs espinudp 4500/4500, site a -> %s answered, MSS clamped to 1260", web)
}

// TestGuestKernelIPsecGateway: two IPsec peers with different grants on one host-network
// gateway in kernel mode, then a live peer change, an agent restart, a spoofed inner source and
// the teardown beside a foreign IPsec user. The subtests share the gateway and run in order.
func TestGuestKernelIPsecGateway(t *testing.T) {
	vmtest.SkipUnlessGuest(t)
	charontest.Skip(t, "nft")
	g := newKernelGW(t)
	a := g.addSite("a", 0, []string{"web"}, nil)
	b := g.addSite("b", 1, []string{"dns"}, []string{"b-app"})
	startEcho(t, b.ns, netip.AddrPortFrom(netip.MustParseAddr("203.0.113.17"), revPort).String())
	g.publish()
	t.Logf("model: peer a reqid %d, peer b reqid %d (0x%08x..0x%08x)", g.peer("a").IPsec.Reqid, g.peer("b").IPsec.Reqid, model.FirstReqid, model.LastReqid)

	g.startCharon()
	g.startAgent(true)
	g.connect(a)
	g.connect(b)
	web := netip.AddrPortFrom(g.vip("web"), 80).String()
	dns := netip.AddrPortFrom(g.vip("dns"), 53).String()

	t.Run("kernel-SAs-and-grants", func(t *testing.T) {
		states := g.node.MustRun("ip", "xfrm", "state")
		if !strings.Contains(states, "rfc4106(gcm(aes))") {
			t.Errorf("no kernel AES-GCM SA:\n%s", states)
		}
		if strings.Contains(states, "espinudp") {
			t.Errorf("without a NAT and without spec.ipsec.forceEncapsulation the SAs are UDP-encapsulated:\n%s", states)
		}
		if _, err := g.node.Run("ip", "link", "show", nft.LibipsecInterface); err == nil {
			t.Errorf("%s exists: kernel-libipsec is loaded", nft.LibipsecInterface)
		}
		policies := g.node.MustRun("ip", "xfrm", "policy")
		for _, p := range []string{"a", "b"} {
			r := g.peer(p).IPsec.Reqid
			if !strings.Contains(policies, fmt.Sprintf("reqid %d ", r)) {
				t.Errorf("no kernel policy with peer %s's reqid %d", p, r)
			}
		}
		t.Logf("kernel ESP: SAs (rfc4106(gcm(aes))) and policies carry the peers' reqids, no %s device", nft.LibipsecInterface)
		ruleset := g.node.MustRun("nft", "list", "table", "ip", nft.Table)
		if !strings.Contains(ruleset, "ipsec in reqid") || strings.Contains(ruleset, "meta ipsec exists") {
			t.Errorf("the applied ruleset does not match by reqid:\n%s", ruleset)
		}

		mustReach := func(s *ipsecSite, network, addr string) {
			t.Helper()
			if err := request(s.ns, network, s.addr, addr, 5*time.Second); err != nil {
				t.Errorf("%s %s -> %s: %v (granted)", s.name, network, addr, err)
				return
			}
			t.Logf("granted: site %s %s -> %s answered", s.name, network, addr)
		}
		mustNotReach := func(s *ipsecSite, network, addr, peer string) {
			t.Helper()
			counter := peer + "'s drops"
			before := g.drops(peer)
			if err := request(s.ns, network, s.addr, addr, 700*time.Millisecond); err == nil {
				t.Errorf("%s %s -> %s answered: not granted", s.name, network, addr)
				return
			}
			after := g.drops(peer)
			if after <= before {
				t.Errorf("%s %s -> %s: dropped but %s did not count it (%d -> %d)", s.name, network, addr, counter, before, after)
				return
			}
			t.Logf("not granted: site %s %s -> %s dropped, %s %d -> %d", s.name, network, addr, counter, before, after)
		}
		mustReach(a, "tcp", web)
		mustReach(b, "udp", dns)
		mustNotReach(a, "udp", dns, "a")
		mustNotReach(b, "tcp", web, "b")

		// Reverse exposure: a client of the gateway's tenant (the LAN's address, a reverse
		// client) reaches b's server through the gateway's port.
		gwPort := g.m.ReverseExposures[0].Ports[0].GatewayPort
		rev := netip.AddrPortFrom(netip.MustParseAddr("198.51.100.129"), gwPort).String()
		if err := request(g.lan, "tcp", backend, rev, 5*time.Second); err != nil {
			t.Errorf("reverse exposure b-app: %s -> %s: %v", backend, rev, err)
		} else {
			t.Logf("reverse exposure: %s -> %s (gateway port) -> 203.0.113.17:%d in b's subnet answered", backend, rev, revPort)
		}
	})

	t.Run("live-peer-change", func(t *testing.T) {
		sa := startStream(t, "a-web", a.ns, "tcp", a.addr, web, 50*time.Millisecond)
		sb := startStream(t, "b-dns", b.ns, "udp", b.addr, dns, 50*time.Millisecond)
		waitUntil(t, "streams running", 10*time.Second, func() error {
			if sa.back.Load() < 5 || sb.back.Load() < 5 {
				return fmt.Errorf("a %d, b %d answers", sa.back.Load(), sb.back.Load())
			}
			return nil
		})
		// b is granted web too, and a third peer (no device yet) joins: the reqid set every
		// tunnel match names gains c's (set elements: a netlink delta), a's and b's SAs stay.
		spis := g.node.MustRun("ip", "xfrm", "state")
		for i := range g.in.Peers {
			if g.in.Peers[i].Name == "b" {
				g.in.Peers[i].Spec.Authorization.Exposures = []string{"dns", "web"}
			}
		}
		g.addSite("c", 2, []string{"web"}, nil)
		deltas := strings.Count(g.agent.Output(), "netlink delta")
		g.publish()
		waitUntil(t, "b reaches web after the change", 20*time.Second, func() error {
			return request(b.ns, "tcp", b.addr, web, time.Second)
		})
		cReqid := g.peer("c").IPsec.Reqid
		waitUntil(t, "c's reqid in the ruleset", 10*time.Second, func() error {
			if out := g.node.MustRun("nft", "list", "set", "ip", nft.Table, nft.SetReqids); !strings.Contains(out, strconv.FormatUint(uint64(cReqid), 10)) {
				return fmt.Errorf("reqid %d not in:\n%s", cReqid, out)
			}
			return nil
		})
		waitUntil(t, "the change applied by a netlink delta", 10*time.Second, func() error {
			if out := g.agent.Output(); strings.Count(out, "netlink delta") <= deltas || strings.Contains(out, "delta not applied") {
				return fmt.Errorf("the agent logged no delta for the change:\n%s", out)
			}
			return nil
		})
		time.Sleep(500 * time.Millisecond) // keep the streams running past the change (not a synchronisation)
		for _, s := range []*stream{sa, sb} {
			sent, back, err := s.finish(3 * time.Second)
			if err != nil || back < sent {
				t.Errorf("stream %s across the change: %d sent, %d answered, error %v", s.name, sent, back, err)
			} else {
				t.Logf("stream %s across the change: %d sent, %d answered, none lost", s.name, sent, back)
			}
		}
		if after := g.node.MustRun("ip", "xfrm", "state"); !sameSPIs(spis, after) {
			t.Errorf("the kernel SAs changed with the peer change:\nbefore\n%s\nafter\n%s", spis, after)
		} else {
			t.Log("a's and b's kernel SAs untouched by the change (same SPIs)")
		}
		t.Logf("b granted web too: b tcp -> %s answered; peer c's reqid %d is in the set %s the tunnel matches name; the change went by a netlink delta", web, cReqid, nft.SetReqids)
	})

	t.Run("spoofed-source-through-a", func(t *testing.T) {
		// Site a's device sends from an address in b's subnet through a's own SA: a policy of
		// its own for that source, using a's SA (reqid 7 on a's side).
		spoof := netip.MustParseAddr("203.0.113.30")
		a.ns.AddLoopback(spoof.String() + "/32")
		a.ns.MustRun("ip", "xfrm", "policy", "add", "src", spoof.String()+"/32", "dst", g.m.ServiceCIDR.String(), "dir", "out",
			"tmpl", "src", a.ext.String(), "dst", ipsecPublic.String(), "proto", "esp", "reqid", strconv.Itoa(siteReqid), "mode", "tunnel")
		send := func(what string) (spoofed, atBackend int) {
			s0, d0 := g.counter(nft.CounterSpoofed), nftCounter(t, g.lan, "inet", "probe", "dns_in")
			sendUDP(t, a.ns, spoof, dns, 5)
			// Wait until all 5 are accounted for, dropped or delivered (the deadline only
			// bounds a datagram that went neither way, which the assertions then report).
			var s1, d1 int
			_ = netns.Eventually(5*time.Second, func() error {
				s1, d1 = g.counter(nft.CounterSpoofed), nftCounter(t, g.lan, "inet", "probe", "dns_in")
				if s1-s0+d1-d0 < 5 {
					return fmt.Errorf("%d dropped, %d delivered", s1-s0, d1-d0)
				}
				return nil
			})
			t.Logf("%s: 5 datagrams %s -> %s (granted to b) through a's SA: %s +%d, at the backend +%d", what, spoof, dns, nft.CounterSpoofed, s1-s0, d1-d0)
			return s1 - s0, d1 - d0
		}
		if s, d := send("kernel policies as charon installed them"); s < 5 || d != 0 {
			t.Errorf("spoof: %s counted %d of 5, backend got %d", nft.CounterSpoofed, s, d)
		}
		// The reqid binding is defence in depth on top of the SAs' selectors: make the node's
		// policies overlap (a's SA admitted for b's subnet, as a selector bug would), and the
		// ruleset alone must stop it.
		aReqid := strconv.FormatUint(uint64(g.peer("a").IPsec.Reqid), 10)
		for _, dir := range []string{"fwd", "in"} {
			g.node.MustRun("ip", "xfrm", "policy", "add", "src", b.subnet.String(), "dst", "0.0.0.0/0", "dir", dir, "priority", "1",
				"tmpl", "src", a.ext.String(), "dst", ipsecPublic.String(), "proto", "esp", "reqid", aReqid, "mode", "tunnel")
		}
		if s, d := send("node policies overlapping (a's SA admitted for b's subnet)"); s < 5 || d != 0 {
			t.Errorf("spoof with overlapping policies: %s counted %d of 5, backend got %d", nft.CounterSpoofed, s, d)
		}
		// The same with the binding removed from the live table (the agent repairs the drift:
		// stop it for the control, then restore it).
		g.agent.Signal(syscall.SIGKILL)
		waitUntil(t, "agent gone", 10*time.Second, func() error {
			if !g.agent.Exited() {
				return fmt.Errorf("running")
			}
			return nil
		})
		g.node.MustRun("nft", "flush", "chain", "ip", nft.Table, "tunnel_source")
		if _, d := send("control: the same ruleset without the reqid binding"); d < 5 {
			t.Errorf("control: without the reqid binding only %d of 5 spoofed datagrams reached the backend; the check above proves nothing", d)
		} else {
			t.Log("control: without the reqid binding the spoof reaches b's exposure: the assertions above fail without it")
		}
		for _, dir := range []string{"fwd", "in"} {
			g.node.MustRun("ip", "xfrm", "policy", "delete", "src", b.subnet.String(), "dst", "0.0.0.0/0", "dir", dir)
		}
		g.startAgent(false)
		if out := g.node.MustRun("nft", "list", "chain", "ip", nft.Table, "tunnel_source"); !strings.Contains(out, nft.CounterSpoofed) {
			t.Fatalf("the restarted agent did not restore the binding:\n%s", out)
		}
		t.Log("the restarted agent re-applied the ruleset with the binding")
	})

	t.Run("agent-restart-keeps-enforcement", func(t *testing.T) {
		spis := g.node.MustRun("ip", "xfrm", "state")
		g.agent.Signal(syscall.SIGTERM)
		waitUntil(t, "agent stopped", 30*time.Second, func() error {
			if !g.agent.Exited() {
				return fmt.Errorf("running")
			}
			return nil
		})
		if !strings.Contains(g.agent.Output(), "tunnels still up") {
			t.Errorf("the stopping agent did not keep the ruleset for the live tunnels:\n%s", g.agent.Output())
		}
		if _, err := g.node.Run("nft", "list", "table", "ip", nft.Table); err != nil {
			t.Fatalf("the ruleset went with the agent: %v", err)
		}
		t.Log("agent stopped (SIGTERM): the ruleset stays, the tunnels are up")
		if err := request(a.ns, "tcp", a.addr, web, 5*time.Second); err != nil {
			t.Errorf("a -> web without the agent: %v", err)
		}
		before := g.drops("a")
		if err := request(a.ns, "udp", a.addr, dns, 700*time.Millisecond); err == nil {
			t.Error("a reached dns while the agent was gone")
		}
		if after := g.drops("a"); after <= before {
			t.Errorf("a -> dns without the agent: not counted (%d -> %d)", before, after)
		} else {
			t.Logf("without the agent: a -> web answered, a -> dns dropped (a's drops %d -> %d)", before, after)
		}
		g.startAgent(false)
		if err := request(b.ns, "udp", b.addr, dns, 5*time.Second); err != nil {
			t.Errorf("b -> dns after the restart: %v", err)
		}
		if after := g.node.MustRun("ip", "xfrm", "state"); !sameSPIs(spis, after) {
			t.Errorf("the agent's restart changed the kernel SAs")
		} else {
			t.Log("agent restarted: same kernel SAs (no tunnel re-established), b -> dns answered")
		}
	})

	t.Run("teardown-beside-a-foreign-ipsec-user", func(t *testing.T) {
		cni := netns.Open(t, g.run.Netns("cni").Name)
		foreignXFRM(t, g.node, cni)
		ping := func(what string) {
			t.Helper()
			p, err := cni.Ping("192.0.2.97", "192.0.2.65", 3, 200*time.Millisecond, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if p.Received != 3 {
				t.Errorf("%s: foreign IPsec ping %d/3\n%s", what, p.Received, p.Output)
				return
			}
			t.Logf("%s: ping through the foreign SA (reqid 1) %d/3", what, p.Received)
		}
		drops := func() int {
			return g.counter(nft.CounterUnknownIn) + g.counter(nft.CounterSpoofed) + g.counter(nft.CounterOther)
		}
		d0 := drops()
		ping("gateway ruleset in force")
		if d := drops(); d != d0 {
			t.Errorf("the gateway's ruleset counted the foreign IPsec traffic (%d -> %d)", d0, d)
		}
		// The pod goes: charon's container stops (its SAs go), then the agent.
		g.charon.Stop()
		g.agent.Signal(syscall.SIGTERM)
		waitUntil(t, "agent stopped", 30*time.Second, func() error {
			if !g.agent.Exited() {
				return fmt.Errorf("running")
			}
			return nil
		})
		if !strings.Contains(g.agent.Output(), "removed the gateway's ruleset") {
			t.Errorf("the agent did not remove its ruleset:\n%s", g.agent.Output())
		}
		if _, err := g.node.Run("nft", "list", "table", "ip", nft.Table); err == nil {
			t.Error("the gateway's table is still there after the teardown")
		}
		states := g.node.MustRun("ip", "xfrm", "state")
		policies := g.node.MustRun("ip", "xfrm", "policy")
		if strings.Count(states, "reqid 1 ") != 2 || !strings.Contains(policies, "reqid 1 ") {
			t.Errorf("the foreign SAs or policies are gone:\n%s\n%s", states, policies)
		}
		for _, p := range g.m.Peers {
			if p.IPsec != nil && strings.Contains(states, fmt.Sprintf("reqid %d ", p.IPsec.Reqid)) {
				t.Errorf("an SA of peer %s is left", p.Name)
			}
		}
		t.Log("teardown: the gateway's table removed (its own SAs gone), the foreign SAs and policies (reqid 1) kept")
		ping("after the teardown")
	})
}

// foreignXFRM sets up another IPsec user between node and cni: static tunnel-mode SAs and
// policies with reqid 1 between 192.0.2.1 and 192.0.2.2, for 192.0.2.64/27 <-> 192.0.2.96/27.
func foreignXFRM(t *testing.T, node, cni *netns.NS) {
	netns.VethAddr(node, "cni0", "192.0.2.1/30", cni, "eth0", "192.0.2.2/30")
	node.AddLoopback("192.0.2.65/32")
	cni.AddLoopback("192.0.2.97/32")
	const (
		un, uc = "192.0.2.1", "192.0.2.2"
		nn, nc = "192.0.2.64/27", "192.0.2.96/27"
	)
	for _, ns := range []*netns.NS{node, cni} {
		ns.MustRun("ip", "xfrm", "state", "add", "src", un, "dst", uc, "proto", "esp", "spi", "0x2001", "reqid", "1", "mode", "tunnel",
			"aead", "rfc4106(gcm(aes))", "0x0102030405060708090a0b0c0d0e0f1011121314", "128")
		ns.MustRun("ip", "xfrm", "state", "add", "src", uc, "dst", un, "proto", "esp", "spi", "0x2002", "reqid", "1", "mode", "tunnel",
			"aead", "rfc4106(gcm(aes))", "0x2122232425262728292a2b2c2d2e2f3031323334", "128")
	}
	pol := func(ns *netns.NS, local, remote, lu, ru string) {
		for _, d := range []struct{ dir, src, dst, ts, td string }{
			{"out", local, remote, lu, ru}, {"in", remote, local, ru, lu}, {"fwd", remote, local, ru, lu},
		} {
			ns.MustRun("ip", "xfrm", "policy", "add", "src", d.src, "dst", d.dst, "dir", d.dir,
				"tmpl", "src", d.ts, "dst", d.td, "proto", "esp", "reqid", "1", "mode", "tunnel")
		}
	}
	pol(node, nn, nc, un, uc)
	pol(cni, nc, nn, uc, un)
	node.MustRun("ip", "route", "add", nc, "via", uc, "src", "192.0.2.65")
	cni.MustRun("ip", "route", "add", nn, "via", un, "src", "192.0.2.97")
	t.Log("foreign IPsec user: static SAs and policies, reqid 1, 192.0.2.64/27 <-> 192.0.2.96/27")
}

// sameSPIs reports whether every SA (SPI) of the first `ip xfrm state` listing is still in the
// second.
func sameSPIs(before, after string) bool {
	spis := func(s string) map[string]bool {
		out := map[string]bool{}
		fields := strings.Fields(s)
		for i := 0; i+1 < len(fields); i++ {
			if fields[i] == "spi" {
				out[fields[i+1]] = true
			}
		}
		return out
	}
	b, a := spis(before), spis(after)
	for k := range b {
		if !a[k] {
			return false
		}
	}
	return len(b) > 0
}
