package firewall

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// site is one peer of a test gateway: its subnets and the exposures it is granted.
type site struct {
	name     string
	subnets  []string
	grants   []string // "web", "db"
	dark     bool     // not authorized
	ownsSSH  bool     // grantee of the reverse exposure
	sshPorts int      // reverse exposure ports (gateway ports 20000...)
}

// testGateway is an IPsec gateway (kernel-libipsec: tunnel ipsec0, cluster eth0) with the
// exposures web (100.64.7.10, tcp 443 and udp 443 -> 192.0.2.10) and db (100.64.7.11, tcp
// 5432 -> dbTarget), the sites as peers, and — when one owns it — the reverse exposure ssh
// for the reverse clients.
func testGateway(dbTarget string, clients []string, sites ...site) *model.Gateway {
	g := &model.Gateway{
		Namespace: "tenant-a", Name: "delta", Protocol: model.ProtocolIPsec, Mode: model.ModeSNAT,
		Endpoint:     model.Endpoint{Kind: model.EndpointFloatingIPPool, FloatingIPPool: "public"},
		ServiceCIDR:  netip.MustParsePrefix("100.64.7.0/24"),
		LocalAddress: netip.MustParseAddr("100.64.7.1"),
		IPsec:        &model.IPsecGateway{IKEVersion: 2, IKEProposals: []string{"aes256gcm16-prfsha256-ecp256"}},
		Exposures: []model.Exposure{
			{Name: "web", VirtualIP: netip.MustParseAddr("100.64.7.10"), Target: netip.MustParseAddr("192.0.2.10"),
				Ports: []model.Port{{Protocol: "tcp", Port: 443, TargetPort: 443}, {Protocol: "udp", Port: 443, TargetPort: 443}}},
			{Name: "db", VirtualIP: netip.MustParseAddr("100.64.7.11"), Target: netip.MustParseAddr(dbTarget),
				Ports: []model.Port{{Protocol: "tcp", Port: 5432, TargetPort: 5432}}},
		},
	}
	for _, s := range sites {
		p := model.Peer{Name: s.name, Authorization: model.Decision{Authorized: !s.dark, Reason: "test"},
			IPsec: &model.IPsecPeer{RemoteAddress: "198.51.100.77", RemoteID: s.name, Reqid: model.PeerReqid(g.Namespace, g.Name, s.name)}}
		for _, c := range s.subnets {
			p.SourceCIDRs = append(p.SourceCIDRs, netip.MustParsePrefix(c))
		}
		if !s.dark {
			p.Exposures = s.grants
			for i := range g.Exposures {
				if slices.Contains(s.grants, g.Exposures[i].Name) {
					g.Exposures[i].GrantedTo = append(g.Exposures[i].GrantedTo, s.name)
				}
			}
		}
		g.Peers = append(g.Peers, p)
		if s.ownsSSH {
			g.InternalSourceCIDRs = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
			for _, c := range clients {
				g.ReverseClients = append(g.ReverseClients, netip.MustParseAddr(c))
			}
			r := model.ReverseExposure{Name: "ssh", VirtualIP: netip.MustParseAddr("100.64.7.20"), Grantee: s.name,
				Target: netip.MustParsePrefix(s.subnets[0]).Addr().Next()}
			for i := range max(1, s.sshPorts) {
				r.Ports = append(r.Ports, model.Port{Protocol: "tcp", Port: 22, TargetPort: 22, GatewayPort: uint16(20000 + i)})
			}
			g.ReverseExposures = []model.ReverseExposure{r}
		}
	}
	return g
}

// regrant gives every site the grants (none: not authorized).
func regrant(sites []site, grants []string) []site {
	for i := range sites {
		sites[i].grants, sites[i].dark = grants, grants == nil
	}
	return sites
}

// onHost moves the gateway to the host network, its reverse exposure's Service at serviceIP
// (the maps rev_svc_dnat and rev_svc_snat).
func onHost(serviceIP string, g *model.Gateway) *model.Gateway {
	g.Endpoint = model.Endpoint{Kind: model.EndpointHostNetwork}
	for i := range g.ReverseExposures {
		g.ReverseExposures[i].ServiceIP = netip.MustParseAddr(serviceIP)
	}
	return g
}

// loadWhole loads a ruleset with `nft -f` in the namespace.
func loadWhole(t testing.TB, ns *netns.NS, ruleset string) {
	t.Helper()
	if out, err := ns.RunInput(ruleset, "nft", "-f", "-"); err != nil {
		t.Fatalf("nft -f in %s: %v\n%s", ns.Name, err, out)
	}
}

func render(t testing.TB, g *model.Gateway) string {
	t.Helper()
	return renderFor(t, g, true)
}

// renderFor renders for kernel-libipsec (the tunnel interface) or for kernel ESP (reqids).
func renderFor(t testing.TB, g *model.Gateway, libipsec bool) string {
	t.Helper()
	text, err := nft.Render(g, nft.DefaultOptions(g, libipsec))
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// A ruleset change of counters and elements goes to the kernel as one netlink transaction
// that leaves exactly the table a whole load of the new ruleset leaves (their listings are
// equal, and the next Verify agrees); a change of structure is loaded whole. Every step runs
// against the table the previous steps left.
func TestDeltaEqualsWholeLoad(t *testing.T) {
	netns.Skip(t, "nft")
	t.Run("kernel-libipsec", func(t *testing.T) { testDeltaEqualsWholeLoad(t, true) })
	// Kernel ESP: the tunnel is matched by the set of the peers' reqids and the sources by
	// (reqid . subnet); both change with the peers, by netlink too.
	t.Run("kernel-esp", func(t *testing.T) {
		probe := netns.NewRun(t, "bfp").NS("probe")
		if out, err := probe.RunInput("table ip p {\n\tset s {\n\t\ttypeof ipsec in reqid\n\t}\n}\n", "nft", "-f", "-"); err != nil {
			t.Skipf("this kernel's nftables has no ipsec expression: %v %s", err, out)
		}
		testDeltaEqualsWholeLoad(t, false)
	})
}

func testDeltaEqualsWholeLoad(t *testing.T, libipsec bool) {
	run := netns.NewRun(t, "bfd")
	gw, ref := run.NS("gw"), run.NS("ref")
	f := &Firewall{NFT: writeWrapper(t, gw.Name), NetNS: filepath.Join("/run/netns", gw.Name),
		// As in the agent: Verify lists the table only when the generation moved.
		Generation: func() (g uint32, err error) {
			err = netns.Do(gw.Name, func() (err error) { g, err = KernelGeneration(); return err })
			return g, err
		}}
	t.Cleanup(func() { _ = f.Close() })
	ctx := context.Background()

	a := site{name: "a", subnets: []string{"203.0.113.0/25"}, grants: []string{"web", "db"}, ownsSSH: true}
	b := site{name: "b", subnets: []string{"203.0.113.128/26", "198.51.100.128/25"}, grants: []string{"web"}}
	wide := site{name: "wide", subnets: []string{"203.0.113.0/24"}, grants: []string{"db"}}
	host := site{name: "host", subnets: []string{"192.0.2.77/32"}, grants: []string{"db"}}
	adj := site{name: "adj", subnets: []string{"203.0.113.192/27", "203.0.113.224/27"}, grants: []string{"web"}}
	darkC := site{name: "c", subnets: []string{"203.0.113.64/26"}, dark: true}
	clients := []string{"198.51.100.10"}

	// The rulesets look peer subnets up by prefix length, one set per length in use: a step
	// that brought the first peer of a length, or took the last, would change the structure.
	// Anchors hold every length the steps produce (/24 to /32), so the steps change contents.
	var anchors []site
	for bits := 24; bits <= 32; bits++ {
		anchors = append(anchors, site{name: fmt.Sprintf("anchor-%d", bits), subnets: []string{fmt.Sprintf("100.80.%d.0/%d", bits, bits)}, grants: []string{"web", "db"}})
	}
	anchored := func(dbTarget string, clients []string, sites ...site) *model.Gateway {
		return testGateway(dbTarget, clients, append(slices.Clone(anchors), sites...)...)
	}
	steps := []struct {
		name string
		gw   *model.Gateway
		path applyPath
		// kernelPath, when set, is the path under kernel ESP, whose rulesets hold a reqid
		// and a (reqid . subnet) element more per peer: more changes than one batch takes.
		kernelPath applyPath
	}{
		{"first load", anchored("192.0.2.20", clients, a, b), pathFull, pathNone},
		{"peer added", anchored("192.0.2.20", clients, a, b, host), pathDelta, pathNone},
		{"overlapping wider peer added", anchored("192.0.2.20", clients, a, b, host, wide), pathDelta, pathNone},
		{"adjacent blocks of one peer", anchored("192.0.2.20", clients, a, b, host, wide, adj), pathDelta, pathNone},
		{"inner peer removed: the wider one takes its addresses", anchored("192.0.2.20", clients, a, host, wide, adj), pathDelta, pathNone},
		{"grant revoked", anchored("192.0.2.20", clients, a, host, site{name: "wide", subnets: wide.subnets}, adj), pathDelta, pathNone},
		{"dark peer added over an authorized one", anchored("192.0.2.20", clients, a, host, darkC, adj), pathDelta, pathNone},
		{"DNAT target changed", anchored("192.0.2.21", clients, a, host, darkC, adj), pathDelta, pathNone},
		{"reverse clients and ports changed", anchored("192.0.2.21", []string{"198.51.100.11", "198.51.100.12"},
			site{name: "a", subnets: a.subnets, grants: a.grants, ownsSSH: true, sshPorts: 3}, host, darkC, adj), pathDelta, pathNone},
		{"host network: structure changes", onHost("100.64.12.5", anchored("192.0.2.21", []string{"198.51.100.11", "198.51.100.12"},
			site{name: "a", subnets: a.subnets, grants: a.grants, ownsSSH: true, sshPorts: 3}, host, darkC, adj)), pathReload, pathNone},
		{"host network: Service IP changed, peer added", onHost("100.64.12.6", anchored("192.0.2.21", []string{"198.51.100.11", "198.51.100.12"},
			site{name: "a", subnets: a.subnets, grants: a.grants, ownsSSH: true, sshPorts: 3}, b, host, darkC, adj)), pathDelta, pathNone},
		{"reverse exposure gone: structure changes", anchored("192.0.2.21", nil, site{name: "a", subnets: a.subnets, grants: a.grants}, host, adj), pathReload, pathNone},
		{"every peer but the anchors removed", anchored("192.0.2.21", nil), pathDelta, pathNone},
		{"peers back", anchored("192.0.2.21", nil, site{name: "a", subnets: a.subnets, grants: a.grants}, b, wide), pathDelta, pathNone},
		// 300 peers at once: 300 subnet elements (under kernel ESP a reqid and a source each too).
		{"many peers at once", anchored("192.0.2.21", nil, append([]site{{name: "a", subnets: a.subnets, grants: a.grants}, b, wide}, benchSites(300)...)...), pathDelta, pathNone},
		// 1,900 more: more elements of one set than one message holds, just under the limit of
		// one batch (under kernel ESP three times as many changes: loaded whole).
		{"1,900 peers at once", anchored("192.0.2.21", nil, append([]site{{name: "a", subnets: a.subnets, grants: a.grants}, b, wide}, benchSites(2200)...)...), pathDelta, pathReload},
		{"too many at once: loaded whole", anchored("192.0.2.21", nil, benchSites(4500)...), pathReload, pathNone},
		{"1,200 peers without grants", anchored("192.0.2.21", nil, regrant(benchSites(1200), nil)...), pathReload, pathNone},
		// Every subnet element's value (its grant class) changes: 2,400 changes.
		{"1,200 grants at once", anchored("192.0.2.21", nil, regrant(benchSites(1200), []string{"db"})...), pathReload, pathNone},
		{"one of 1,200 peers removed", anchored("192.0.2.21", nil, regrant(benchSites(1200), []string{"db"})[1:]...), pathDelta, pathDelta},
	}
	for _, s := range steps {
		text := renderFor(t, s.gw, libipsec)
		wantPath := s.path
		if !libipsec && s.kernelPath != pathNone {
			wantPath = s.kernelPath
		}
		f.last = pathNone
		if err := f.Apply(ctx, text); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if f.last != wantPath {
			t.Errorf("%s: applied by path %d, want %d", s.name, f.last, wantPath)
		}
		loadWhole(t, ref, text)
		got := normalizeListing(gw.MustRun("nft", "-s", "list", "table", "ip", "bnerd_vpn"))
		want := normalizeListing(ref.MustRun("nft", "-s", "list", "table", "ip", "bnerd_vpn"))
		if diff := listingDiff(want, got); diff != "" {
			t.Fatalf("%s: the table differs from a whole load: %s", s.name, diff)
		}
		// The listing the delta was expected to leave is the one the table has.
		if d, err := f.Verify(ctx); err != nil || d.Drifted() {
			t.Fatalf("%s: Verify after the change: %+v %v", s.name, d, err)
		}
	}

	// A table changed behind a delta's back is found by the same check, and repaired by a
	// whole load: an element slipped in, then a delta that does not touch it.
	gw.MustRun("nft", "add", "element", "ip", "bnerd_vpn", "fwd_grants", "{ 0x00000099 . 192.0.2.200 . tcp . 443 }")
	text := renderFor(t, anchored("192.0.2.22", nil, regrant(benchSites(1200), []string{"db"})[1:]...), libipsec)
	if err := f.Apply(ctx, text); err != nil || f.last != pathDelta {
		t.Fatalf("a delta over a changed table: %v, path %d", err, f.last)
	}
	d, err := f.Verify(ctx)
	if err != nil || d.Kind != agent.DriftChanged || !strings.Contains(d.Detail, "192.0.2.200") {
		t.Fatalf("Verify after a delta over a changed table: %+v %v", d, err)
	}
	loadWhole(t, ref, text)
	if diff := listingDiff(normalizeListing(ref.MustRun("nft", "-s", "list", "table", "ip", "bnerd_vpn")),
		normalizeListing(gw.MustRun("nft", "-s", "list", "table", "ip", "bnerd_vpn"))); diff != "" {
		t.Fatalf("after the repair: %s", diff)
	}
}

// Which of each fixture's changes the renderer's layouts see as contents only.
func TestDeltaOfRenderedChanges(t *testing.T) {
	a := site{name: "a", subnets: []string{"203.0.113.0/25"}, grants: []string{"web"}}
	b := site{name: "b", subnets: []string{"203.0.113.128/25"}, grants: []string{"web", "db"}}
	old, err := nft.Split(render(t, testGateway("192.0.2.20", nil, a)))
	if err != nil {
		t.Fatal(err)
	}
	next, err := nft.Split(render(t, testGateway("192.0.2.20", nil, a, b)))
	if err != nil {
		t.Fatal(err)
	}
	d, ok := nft.Diff(old, next)
	if !ok {
		t.Fatalf("a peer added changes the structure:\n%s\n---\n%s", old.Structure, next.Structure)
	}
	got := fmt.Sprintf("%v %v", d.AddCounters, d.DelCounters)
	for _, s := range d.Sets {
		got += fmt.Sprintf(" %s-%v+%v", s.Set.Name, s.Del, s.Add)
	}
	// b's grants are a class of their own: its ports are granted to it once, by class id.
	want := `[] [] peer_25-[]+[203.0.113.128 : 0x90ce9538]` +
		` fwd_grants-[]+[0x90ce9538 . 100.64.7.10 . tcp . 443 0x90ce9538 . 100.64.7.10 . udp . 443 0x90ce9538 . 100.64.7.11 . tcp . 5432]`
	if got != want {
		t.Errorf("delta\n%s\nwant\n%s", got, want)
	}
	// c is granted what a is: its subnet joins a's class, nothing else changes.
	c := site{name: "c", subnets: []string{"198.51.100.0/25"}, grants: []string{"web"}}
	third, err := nft.Split(render(t, testGateway("192.0.2.20", nil, a, b, c)))
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := nft.Diff(next, third); !ok || len(d.Sets) != 1 || len(d.Sets[0].Add) != 1 || !strings.HasPrefix(d.Sets[0].Add[0], "198.51.100.0 : ") {
		t.Errorf("a peer granted as another: %+v (%v)", d, ok)
	}
	if _, err := deltaMessages(d); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(next.Structure, "203.0.113") || strings.Contains(next.Structure, "peer_b") {
		t.Errorf("contents in the structure:\n%s", next.Structure)
	}
}

// A delta the kernel refuses changes nothing: not the counter it would have created, not the
// elements before the refused one. The table lists as before and its counters go on counting
// from where they were; then a delta the kernel takes keeps them counting too. And an Apply
// whose delta is refused loads the ruleset whole instead.
func TestRefusedDeltaLeavesTableWhole(t *testing.T) {
	netns.Skip(t, "nft", "ping")
	run := netns.NewRun(t, "bfr")
	ns := run.NS("gw")
	ns.MustRun("ip", "addr", "add", "192.0.2.1/32", "dev", "lo")
	f := &Firewall{NFT: writeWrapper(t, ns.Name), NetNS: filepath.Join("/run/netns", ns.Name)}
	t.Cleanup(func() { _ = f.Close() })
	ctx := context.Background()
	if err := f.Apply(ctx, driftRuleset); err != nil {
		t.Fatal(err)
	}
	p := &peerPings{t: t, ns: ns, f: f}
	ping, counted := p.ping, p.counted
	ping(3)
	before := ns.MustRun("nft", "-s", "list", "table", "ip", "bnerd_vpn")

	l, err := nft.Split(driftRuleset)
	if err != nil {
		t.Fatal(err)
	}
	set := func(name string) nft.SetContents {
		i := slices.IndexFunc(l.Sets, func(s nft.SetContents) bool { return s.Name == name })
		if i < 0 {
			t.Fatalf("no set %s in %+v", name, l.Sets)
		}
		return l.Sets[i]
	}
	refused := nft.Delta{
		AddCounters: []string{"peer_c_in"},
		Sets: []nft.SetDelta{
			{Set: set("peer_in"), Del: []string{`203.0.113.16/28 : "peer_b_in"`, `198.51.100.0/25 : "peer_b_in"`}, Add: []string{`192.0.2.128/25 : "peer_c_in"`}},
			{Set: set("fwd_grants"), Add: []string{"192.0.2.128/25 . 100.64.7.10 . tcp . 443"}},
			// The key is there already, with another value: the kernel refuses it.
			{Set: set("fwd_dnat"), Add: []string{"100.64.7.12 . tcp . 22 : 192.0.2.99 . 22"}},
		},
		DelCounters: []string{"peer_b_in"},
	}
	err = f.delta(refused)
	if err == nil || !strings.Contains(err.Error(), "nftables refused the change") {
		t.Fatalf("a delta with an element that exists: %v", err)
	}
	if after := ns.MustRun("nft", "-s", "list", "table", "ip", "bnerd_vpn"); after != before {
		t.Fatalf("a refused delta changed the table:\n%s\nwas\n%s", after, before)
	}
	ping(2)
	if got := counted(); got != uint64(p.sent) {
		t.Fatalf("counter after a refused delta: %d, want %d", got, p.sent)
	}

	// The same change less the refused element goes through; the counter that stays keeps
	// counting (a whole load would restart it at zero).
	refused.Sets = refused.Sets[:2]
	if err := f.delta(refused); err != nil {
		t.Fatal(err)
	}
	listed := ns.MustRun("nft", "-s", "list", "table", "ip", "bnerd_vpn")
	if !strings.Contains(listed, `192.0.2.128/25 : "peer_c_in"`) || strings.Contains(listed, "peer_b_in") {
		t.Fatalf("the delta is not in the table:\n%s", listed)
	}
	ping(1)
	if got := counted(); got != uint64(p.sent) {
		t.Fatalf("counter after a delta: %d, want %d", got, p.sent)
	}
	if err := f.Remove(ctx); err != nil {
		t.Fatal(err)
	}

	// Apply: a table that already has an element the change adds refuses the delta; the
	// ruleset is then loaded whole, and the table is that of a whole load.
	a := site{name: "a", subnets: []string{"203.0.113.0/28"}, grants: []string{"web"}}
	b := site{name: "b", subnets: []string{"203.0.113.16/28"}, grants: []string{"web"}}
	if err := f.Apply(ctx, render(t, testGateway("192.0.2.20", nil, a))); err != nil {
		t.Fatal(err)
	}
	ns.MustRun("nft", "add", "element", "ip", "bnerd_vpn", "peer_28", "{ 203.0.113.16 : 0x00000001 }")
	next := render(t, testGateway("192.0.2.20", nil, a, b))
	if err := f.Apply(ctx, next); err != nil {
		t.Fatal(err)
	}
	if f.last != pathReload {
		t.Errorf("a refused delta was not followed by a whole load into the table (path %d)", f.last)
	}
	ref := run.NS("ref")
	loadWhole(t, ref, next)
	if diff := listingDiff(normalizeListing(ref.MustRun("nft", "-s", "list", "table", "ip", "bnerd_vpn")),
		normalizeListing(ns.MustRun("nft", "-s", "list", "table", "ip", "bnerd_vpn"))); diff != "" {
		t.Fatalf("after the whole load: %s", diff)
	}
}
