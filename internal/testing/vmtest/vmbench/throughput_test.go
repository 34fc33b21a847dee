// Package vmbench measures the production dataplane against the userspace one the other tests
// use, inside the test VM (internal/testing/vmtest): TCP throughput through the same exposure of a
// rendered ruleset with kernel ESP (XFRM, charon's kernel-netlink) vs strongSwan's
// kernel-libipsec, and with the kernel WireGuard device vs wireguard-go. BenchmarkVMThroughput
// boots the VM, TestGuestThroughput measures inside it.
package vmbench

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
	rwg "github.com/bnerd/bnerd-vpn-operator/internal/render/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/charontest"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/vmtest"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/wgtest"
)

func TestMain(m *testing.M) { wgtest.Main(m) }

// The guest prints one line per variant: marker, variant, Mbit/s.
const marker = "VM-THROUGHPUT"

// Variants, and the pairs whose ratio the benchmark prints (kernel / userspace).
const (
	ipsecKernel   = "ipsec-kernel-esp"
	ipsecLibipsec = "ipsec-kernel-libipsec"
	wgKernel      = "wireguard-kernel"
	wgUserspace   = "wireguard-go"
)

var pairs = [][2]string{{ipsecKernel, ipsecLibipsec}, {wgKernel, wgUserspace}}

// BenchmarkVMThroughput boots the VM (skipped where it cannot run: see vmtest.Available) and
// prints the throughput of each variant and the kernel / userspace ratios. Under TCG (no
// hardware virtualization) absolute figures mean little; the ratios are the point.
func BenchmarkVMThroughput(b *testing.B) {
	if b.N > 1 {
		b.Skip("one VM run measures everything (make bench runs -benchtime 1x)")
	}
	res := vmtest.Run(b, "./internal/testing/vmtest/vmbench", vmtest.Options{
		Run:     "^TestGuestThroughput$",
		Modules: append(slices.Clone(vmtest.DefaultModules), "tun", "nft_nat", "nft_masq"),
		Timeout: 4 * time.Minute,
	})
	if res.ExitCode != 0 {
		return
	}
	figures, rounds := map[string]float64{}, map[string]string{}
	for _, m := range regexp.MustCompile(marker+` (\S+) ([0-9.]+) rounds (\S+)`).FindAllStringSubmatch(res.Output, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		figures[m[1]], rounds[m[1]] = v, m[3]
	}
	fmt.Printf("%s: inside the VM (%s, Debian's kernel), one TCP stream through an exposure of the rendered ruleset, best of %d alternating rounds of %s s per variant (VM run %.0f s):\n",
		b.Name(), res.Accel, guestRounds, guestSeconds, res.Total.Seconds())
	for _, p := range pairs {
		k, u := figures[p[0]], figures[p[1]]
		if k == 0 || u == 0 {
			b.Fatalf("the VM reported no figure for %s or %s:\n%v", p[0], p[1], figures)
		}
		fmt.Printf("  %s %.1f Mbit/s (rounds %s), %s %.1f Mbit/s (rounds %s): kernel / userspace %.2f\n", p[0], k, rounds[p[0]], p[1], u, rounds[p[1]], k/u)
		b.ReportMetric(k, "Mbit/s-"+p[0])
		b.ReportMetric(u, "Mbit/s-"+p[1])
		b.ReportMetric(k/u, p[0]+"/"+p[1])
	}
}

// Guest topology: the site (its subnet's host on lo or its WireGuard device) reaches the
// gateway over a veth; the gateway's ruleset DNATs the exposure's virtual IP to the backend in
// the LAN and masquerades, as the agent's does.
const (
	siteOuter, gwOuter = "198.51.100.2", "198.51.100.1"
	guestSeconds       = "3"
	iperfPort          = 5201
)

var (
	siteSubnet  = netip.MustParsePrefix("203.0.113.0/28")
	serviceCIDR = netip.MustParsePrefix("100.64.7.0/24")
	gwService   = netip.MustParseAddr("100.64.7.1")
	vip         = netip.MustParseAddr("100.64.7.10")
	backend     = netip.MustParseAddr("192.0.2.10")
)

// path is one variant's own namespaces (site, gateway, LAN with an iperf3 server), its tunnel
// and ruleset; all four exist at once, so their rounds can alternate.
type path struct {
	t             *testing.T
	variant       string
	site, gw, lan *netns.NS
	src           netip.Addr // the site's host, the traffic's source
	check         func()     // fails the test unless the variant's dataplane carried the traffic
	mbits         []float64
}

// guestRounds per variant, alternating across the variants; the best counts.
const guestRounds = 2

// TestGuestThroughput runs inside the VM only: each variant gets the same topology in
// namespaces of its own, the same exposure and the ruleset rendered for its dataplane; rounds
// alternate across the variants (the host's load drifts), and each variant is checked to carry
// the traffic the way it claims (XFRM states count it; a TUN ipsec0; a wireguard link).
func TestGuestThroughput(t *testing.T) {
	vmtest.SkipUnlessGuest(t)
	netns.Skip(t, "iperf3", "nft")
	run := charontest.NewRun(t)
	start := time.Now()
	var paths []*path
	for i, v := range []struct {
		name  string
		setup func(*path)
	}{
		{ipsecKernel, (*path).ipsec}, {ipsecLibipsec, (*path).ipsec},
		{wgKernel, (*path).wireGuard}, {wgUserspace, (*path).wireGuard},
	} {
		p := &path{t: t, variant: v.name}
		n := strconv.Itoa(i)
		p.site, p.gw, p.lan = run.Netns("site"+n), run.Netns("gw"+n), run.Netns("lan"+n)
		netns.VethAddr(p.site, "ext0", siteOuter+"/24", p.gw, "ext0", gwOuter+"/24")
		netns.VethAddr(p.gw, "eth0", "192.0.2.1/24", p.lan, "eth0", backend.String()+"/24")
		p.gw.Sysctl("net.ipv4.ip_forward", "1")
		p.lan.Start("iperf3", "-s", "-B", backend.String())
		began := time.Now()
		v.setup(p)
		t.Logf("%s: set up in %.1f s", v.name, time.Since(began).Seconds())
		paths = append(paths, p)
	}
	t.Logf("four tunnels and rulesets set up in %.1f s", time.Since(start).Seconds())
	start = time.Now()
	for r := 0; r < guestRounds; r++ {
		for _, p := range paths {
			p.mbits = append(p.mbits, p.iperf())
		}
	}
	t.Logf("%d rounds of %s s per variant in %.1f s", guestRounds, guestSeconds, time.Since(start).Seconds())
	for _, p := range paths {
		p.check()
		rounds := make([]string, len(p.mbits))
		for i, m := range p.mbits {
			rounds[i] = strconv.FormatFloat(m, 'f', 1, 64)
		}
		fmt.Printf("%s %s %.1f rounds %s\n", marker, p.variant, slices.Max(p.mbits), strings.Join(rounds, "/"))
	}
}

// gateway is the model the ruleset is rendered from: one peer, the site, granted the exposure.
func gateway(proto model.Protocol) *model.Gateway {
	g := &model.Gateway{
		Namespace: "vm", Name: "bench", Protocol: proto, Mode: model.ModeSNAT,
		Endpoint:    model.Endpoint{Kind: model.EndpointFloatingIPPool, FloatingIPPool: "public"},
		ServiceCIDR: serviceCIDR, LocalAddress: gwService,
		Exposures: []model.Exposure{{Name: "iperf", VirtualIP: vip, Target: backend,
			Ports: []model.Port{{Protocol: "tcp", Port: iperfPort, TargetPort: iperfPort}}, GrantedTo: []string{"site"}}},
		Peers: []model.Peer{{Name: "site", Authorization: model.Decision{Authorized: true, Reason: model.ReasonAuthorized},
			Exposures: []string{"iperf"}, SourceCIDRs: []netip.Prefix{siteSubnet}}},
	}
	if proto == model.ProtocolIPsec {
		g.IPsec = &model.IPsecGateway{IKEVersion: 2, IKEProposals: []string{"aes256gcm16-prfsha256-ecp256"}}
		g.Peers[0].IPsec = &model.IPsecPeer{RemoteAddress: siteOuter, RemoteID: "site"}
	} else {
		g.WireGuard = &model.WireGuardGateway{ListenPort: 51820, MTU: 1420}
		g.Peers[0].WireGuard = &model.WireGuardPeer{}
	}
	return g
}

// loadRuleset renders the gateway's ruleset for its dataplane and loads it in the gateway.
func (p *path) loadRuleset(m *model.Gateway, userspace bool) {
	p.t.Helper()
	text, err := nft.Render(m, nft.DefaultOptions(m, userspace))
	if err != nil {
		p.t.Fatal(err)
	}
	if out, err := p.gw.RunInput(text, "nft", "-f", "-"); err != nil {
		p.t.Fatalf("%s: loading the ruleset: %v\n%s", p.variant, err, out)
	}
}

// iperf is one timed stream from the site's host to the exposure (one second omitted).
func (p *path) iperf() float64 {
	p.t.Helper()
	res, err := p.site.Iperf3(vip.String(), "-B", p.src.String(), "-t", guestSeconds, "-O", "1")
	if err != nil {
		p.t.Fatalf("%s: %v", p.variant, err)
	}
	if res.Received == 0 {
		p.t.Fatalf("%s: iperf3 received nothing: %+v", p.variant, res)
	}
	return res.Mbits()
}

// ipsec: a charon in the site and in the gateway with the same minimal PSK connection; the
// kernel variant loads no kernel-libipsec (kernel-netlink installs XFRM states), the
// libipsec one loads it (ESP in charon, through the TUN device ipsec0).
func (p *path) ipsec() {
	t := p.t
	userspace := p.variant == ipsecLibipsec
	plugins := charontest.DefaultPlugins
	if !userspace {
		plugins = slices.DeleteFunc(slices.Clone(plugins), func(s string) bool { return s == "kernel-libipsec" })
	}
	// Under TCG an IKE exchange can take seconds: the tests' fast-failure retransmits would
	// give up before the answer comes.
	cfg := charontest.Config{Plugins: plugins, RetransmitTimeout: 2, RetransmitTries: 4}
	psk := "vm-bench-" + p.variant
	p.src = netip.MustParseAddr("203.0.113.1")
	site := charontest.Start(t, p.site, "site-"+p.variant, cfg)
	gw := charontest.Start(t, p.gw, "gw-"+p.variant, cfg)
	p.site.AddLoopback(p.src.String() + "/32") // charon's routes take their source from local_ts
	p.gw.AddLoopback(gwService.String() + "/32")
	siteEnd := charontest.End{Addr: netip.MustParseAddr(siteOuter), ID: "site", TS: []netip.Prefix{siteSubnet}}
	gwEnd := charontest.End{Addr: netip.MustParseAddr(gwOuter), ID: "gw", TS: []netip.Prefix{serviceCIDR}}
	if err := gw.LoadSwanctlConf(charontest.PSKConf(gwEnd, siteEnd, psk, false)); err != nil {
		t.Fatal(err)
	}
	if err := site.LoadSwanctlConf(charontest.PSKConf(siteEnd, gwEnd, psk, true)); err != nil {
		t.Fatal(err)
	}
	p.loadRuleset(gateway(model.ProtocolIPsec), userspace)
	p.check = func() {
		_, tunErr := p.gw.Run("ip", "link", "show", nft.LibipsecInterface)
		states := p.gw.MustRun("ip", "-s", "xfrm", "state")
		switch {
		case userspace && tunErr != nil:
			t.Errorf("%s: no %s in the gateway: charon did not run kernel-libipsec", p.variant, nft.LibipsecInterface)
		case userspace && strings.Contains(states, "spi"):
			t.Errorf("%s: kernel XFRM states in the gateway:\n%s", p.variant, states)
		case !userspace && tunErr == nil:
			t.Errorf("%s: %s exists: charon loaded kernel-libipsec", p.variant, nft.LibipsecInterface)
		case !userspace && xfrmBytes(states) < 1<<20:
			t.Errorf("%s: the gateway's XFRM states counted %d bytes, want the transfers':\n%s", p.variant, xfrmBytes(states), states)
		}
	}
}

// xfrmBytes sums the byte counters of `ip -s xfrm state` ("lifetime current:" then
// "N(bytes), M(packets)").
func xfrmBytes(out string) int64 {
	var n int64
	for _, m := range regexp.MustCompile(`lifetime current:\s*\n\s*(\d+)\(bytes\)`).FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseInt(m[1], 10, 64)
		n += v
	}
	return n
}

// wireGuard: the product's WireGuard driver in the site and the gateway (wg0, which the
// ruleset names), kernel device or wireguard-go.
func (p *path) wireGuard() {
	t := p.t
	mode := wireguard.ModeKernel
	if p.variant == wgUserspace {
		mode = wireguard.ModeUserspace
	}
	siteKey, gwKey := wgtest.NewKey(t), wgtest.NewKey(t)
	// wireguard-go's UAPI sockets are per machine: the site's device is named per variant.
	gw := wgtest.Start(t, p.gw, wgtest.Options{InterfaceName: nft.WireGuardInterface, Mode: mode})
	site := wgtest.Start(t, p.site, wgtest.Options{InterfaceName: wgtest.UniqueInterfaceName("site"), Mode: mode})
	if gw.Mode != mode || site.Mode != mode {
		t.Fatalf("%s: devices run %s / %s, want %s", p.variant, gw.Mode, site.Mode, mode)
	}
	p.src = netip.MustParseAddr("203.0.113.2")
	// One end: its device listens on port with address, and tunnels to the other end's key.
	end := func(n *wgtest.Node, key, peer wgtypes.Key, port uint16, addr netip.Prefix, allowed netip.Prefix, endpoint string) {
		ref := model.SecretKeyRef{Name: "wg", Key: "privateKey"}
		if err := n.Apply(&rwg.Config{
			Interface: rwg.Interface{ListenPort: port, Address: addr, MTU: 1420, PrivateKey: ref},
			Peers:     []rwg.Peer{{Name: "peer", PublicKey: peer.PublicKey().String(), AllowedIPs: []netip.Prefix{allowed}, Endpoint: endpoint}},
		}, wgtest.Secrets{ref: []byte(key.String())}); err != nil {
			t.Fatalf("%s: %s's device: %v\n%s", p.variant, n.NS.Name, err, n.Log())
		}
	}
	end(gw, gwKey, siteKey, 51820, netip.PrefixFrom(gwService, serviceCIDR.Bits()), siteSubnet, siteOuter+":51821")
	end(site, siteKey, gwKey, 51821, netip.PrefixFrom(p.src, siteSubnet.Bits()), serviceCIDR, gwOuter+":51820")
	p.loadRuleset(gateway(model.ProtocolWireGuard), false)
	p.check = func() {
		link := p.gw.MustRun("ip", "-d", "link", "show", nft.WireGuardInterface)
		if kernel := strings.Contains(link, "wireguard"); kernel != (mode == wireguard.ModeKernel) {
			t.Errorf("%s: the gateway's %s is not what the variant says:\n%s", p.variant, nft.WireGuardInterface, link)
		}
	}
}
