// Package vmbench measures the production dataplane against the userspace one the other tests
// use, inside the test VM (internal/vmtest): TCP throughput through the same exposure of a
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

	"github.com/bnerd/bnerd-vpn-operator/internal/agent/strongswan/charontest"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/wireguard/wgtest"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
	rwg "github.com/bnerd/bnerd-vpn-operator/internal/render/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/vmtest"
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
	res := vmtest.Run(b, "./internal/vmtest/vmbench", vmtest.Options{
		Run:     "^TestGuestThroughput$",
		Modules: append(slices.Clone(vmtest.DefaultModules), "tun", "nft_nat", "nft_masq"),
		Timeout: 4 * time.Minute,
	})
	if res.ExitCode != 0 {
		return
	}
	figures := map[string]float64{}
	for _, m := range regexp.MustCompile(marker+` (\S+) ([0-9.]+)`).FindAllStringSubmatch(res.Output, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		figures[m[1]] = v
	}
	fmt.Printf("%s: inside the VM (%s, Debian's kernel), one TCP stream through an exposure of the rendered ruleset, %s s measured per variant (VM run %.0f s):\n",
		b.Name(), res.Accel, guestSeconds, res.Total.Seconds())
	for _, p := range pairs {
		k, u := figures[p[0]], figures[p[1]]
		if k == 0 || u == 0 {
			b.Fatalf("the VM reported no figure for %s or %s:\n%v", p[0], p[1], figures)
		}
		fmt.Printf("  %s %.0f Mbit/s, %s %.0f Mbit/s: kernel / userspace %.2f\n", p[0], k, p[1], u, k/u)
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

type guest struct {
	t             *testing.T
	site, gw, lan *netns.NS
	run           *charontest.Run
}

// TestGuestThroughput runs inside the VM only: each variant gets the same namespaces, the same
// exposure and the ruleset rendered for its dataplane, and is checked to carry the traffic
// the way it claims (XFRM states count it, or the tunnel is a TUN / wireguard link).
func TestGuestThroughput(t *testing.T) {
	vmtest.SkipUnlessGuest(t)
	netns.Skip(t, "iperf3", "nft")
	g := &guest{t: t, run: charontest.NewRun(t)}
	g.site, g.gw, g.lan = g.run.Netns("site"), g.run.Netns("gw"), g.run.Netns("lan")
	netns.VethAddr(g.site, "ext0", siteOuter+"/24", g.gw, "ext0", gwOuter+"/24")
	netns.VethAddr(g.gw, "eth0", "192.0.2.1/24", g.lan, "eth0", backend.String()+"/24")
	g.gw.Sysctl("net.ipv4.ip_forward", "1")
	g.lan.Start("iperf3", "-s", "-B", backend.String())

	for _, v := range []struct {
		name string
		f    func(string) float64
	}{
		{ipsecKernel, g.ipsec}, {ipsecLibipsec, g.ipsec},
		{wgKernel, g.wireGuard}, {wgUserspace, g.wireGuard},
	} {
		start := time.Now()
		mbits := v.f(v.name)
		t.Logf("%s: %.1f Mbit/s (set up, measured and taken down in %.1f s)", v.name, mbits, time.Since(start).Seconds())
		fmt.Printf("%s %s %.1f\n", marker, v.name, mbits)
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
func (g *guest) loadRuleset(m *model.Gateway, userspace bool) {
	g.t.Helper()
	text, err := nft.Render(m, nft.DefaultOptions(m, userspace))
	if err != nil {
		g.t.Fatal(err)
	}
	if out, err := g.gw.RunInput(text, "nft", "-f", "-"); err != nil {
		g.t.Fatalf("loading the ruleset: %v\n%s", err, out)
	}
}

// iperf is one timed stream from the site's host to the exposure (one second omitted).
func (g *guest) iperf(src netip.Addr) float64 {
	g.t.Helper()
	res, err := g.site.Iperf3(vip.String(), "-B", src.String(), "-t", guestSeconds, "-O", "1")
	if err != nil {
		g.t.Fatal(err)
	}
	return res.Mbits()
}

// ipsec: a charon in the site and in the gateway with the same minimal PSK connection; the
// kernel variant loads no kernel-libipsec (kernel-netlink installs XFRM states), the
// libipsec one loads it (ESP in charon, through the TUN device ipsec0).
func (g *guest) ipsec(variant string) float64 {
	t := g.t
	userspace := variant == ipsecLibipsec
	plugins := charontest.DefaultPlugins
	if !userspace {
		plugins = slices.DeleteFunc(slices.Clone(plugins), func(p string) bool { return p == "kernel-libipsec" })
	}
	cfg := charontest.Config{Plugins: plugins}
	psk := "vm-bench-" + variant
	site := charontest.Start(t, g.site, "site-"+variant, cfg)
	gw := charontest.Start(t, g.gw, "gw-"+variant, cfg)
	g.site.AddLoopback("203.0.113.1/32") // charon's routes take their source from local_ts
	g.gw.AddLoopback(gwService.String() + "/32")
	defer func() {
		site.Stop()
		gw.Stop()
		for _, ns := range []*netns.NS{g.site, g.gw} {
			ns.MustRun("ip", "xfrm", "state", "flush")
			ns.MustRun("ip", "xfrm", "policy", "flush")
		}
		g.site.MustRun("ip", "addr", "del", "203.0.113.1/32", "dev", "lo")
		g.gw.MustRun("ip", "addr", "del", gwService.String()+"/32", "dev", "lo")
	}()
	siteEnd := charontest.End{Addr: netip.MustParseAddr(siteOuter), ID: "site", TS: []netip.Prefix{siteSubnet}}
	gwEnd := charontest.End{Addr: netip.MustParseAddr(gwOuter), ID: "gw", TS: []netip.Prefix{serviceCIDR}}
	if err := gw.LoadSwanctlConf(charontest.PSKConf(gwEnd, siteEnd, psk, false)); err != nil {
		t.Fatal(err)
	}
	if err := site.LoadSwanctlConf(charontest.PSKConf(siteEnd, gwEnd, psk, true)); err != nil {
		t.Fatal(err)
	}
	g.loadRuleset(gateway(model.ProtocolIPsec), userspace)
	mbits := g.iperf(netip.MustParseAddr("203.0.113.1"))

	_, tunErr := g.gw.Run("ip", "link", "show", nft.LibipsecInterface)
	states := g.gw.MustRun("ip", "-s", "xfrm", "state")
	switch {
	case userspace && tunErr != nil:
		t.Fatalf("%s: no %s in the gateway: charon did not run kernel-libipsec", variant, nft.LibipsecInterface)
	case userspace && strings.Contains(states, "spi"):
		t.Fatalf("%s: kernel XFRM states in the gateway:\n%s", variant, states)
	case !userspace && tunErr == nil:
		t.Fatalf("%s: %s exists: charon loaded kernel-libipsec", variant, nft.LibipsecInterface)
	case !userspace && xfrmBytes(states) < 1<<20:
		t.Fatalf("%s: the gateway's XFRM states counted %d bytes, want the transfer's:\n%s", variant, xfrmBytes(states), states)
	}
	return mbits
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
func (g *guest) wireGuard(variant string) float64 {
	t := g.t
	mode := wireguard.ModeKernel
	if variant == wgUserspace {
		mode = wireguard.ModeUserspace
	}
	siteKey, gwKey := wgtest.NewKey(t), wgtest.NewKey(t)
	ref := model.SecretKeyRef{Name: "wg", Key: "privateKey"}
	gw := wgtest.Start(t, g.gw, wgtest.Options{InterfaceName: nft.WireGuardInterface, Mode: mode})
	site := wgtest.Start(t, g.site, wgtest.Options{InterfaceName: "wg1", Mode: mode})
	defer func() {
		site.Stop()
		gw.Stop()
	}()
	if gw.Mode != mode || site.Mode != mode {
		t.Fatalf("%s: devices run %s / %s, want %s", variant, gw.Mode, site.Mode, mode)
	}
	siteHost := netip.MustParseAddr("203.0.113.2")
	if err := gw.Apply(&rwg.Config{
		Interface: rwg.Interface{ListenPort: 51820, Address: netip.PrefixFrom(gwService, serviceCIDR.Bits()), MTU: 1420, PrivateKey: ref},
		Peers: []rwg.Peer{{Name: "site", PublicKey: siteKey.PublicKey().String(), AllowedIPs: []netip.Prefix{siteSubnet},
			Endpoint: siteOuter + ":51821"}},
	}, wgtest.Secrets{ref: []byte(gwKey.String())}); err != nil {
		t.Fatalf("gateway device: %v\n%s", err, gw.Log())
	}
	if err := site.Apply(&rwg.Config{
		Interface: rwg.Interface{ListenPort: 51821, Address: netip.PrefixFrom(siteHost, siteSubnet.Bits()), MTU: 1420, PrivateKey: ref},
		Peers: []rwg.Peer{{Name: "gw", PublicKey: gwKey.PublicKey().String(), AllowedIPs: []netip.Prefix{serviceCIDR},
			Endpoint: gwOuter + ":51820"}},
	}, wgtest.Secrets{ref: []byte(siteKey.String())}); err != nil {
		t.Fatalf("site device: %v\n%s", err, site.Log())
	}
	m := gateway(model.ProtocolWireGuard)
	g.loadRuleset(m, false)
	mbits := g.iperf(siteHost)

	link := g.gw.MustRun("ip", "-d", "link", "show", nft.WireGuardInterface)
	if kernel := strings.Contains(link, "wireguard"); kernel != (mode == wireguard.ModeKernel) {
		t.Fatalf("%s: the gateway's %s is not what the variant says:\n%s", variant, nft.WireGuardInterface, link)
	}
	return mbits
}
