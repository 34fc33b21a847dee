package nft

import (
	"flag"
	"fmt"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/golden"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen/modelgen"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

func mustRender(t testing.TB, g *model.Gateway, o Options) string {
	t.Helper()
	out, err := Render(g, o)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return out
}

func TestGolden(t *testing.T) {
	for _, tc := range renderCases() {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.gw()
			got := mustRender(t, g, tc.opts(g))
			golden.Assert(t, tc.name, []byte(got))
			// Rendering is deterministic.
			if again := mustRender(t, tc.gw(), tc.opts(tc.gw())); again != got {
				t.Error("a second render differs from the first")
			}
		})
	}
}

// TestGoldenLoads checks every golden with `nft -c -f`, then loads it twice into a fresh
// namespace: the second load replaces the table in place.
func TestGoldenLoads(t *testing.T) {
	netns.Skip(t, "nft")
	run := netns.NewRun(t, "bnftg")
	ns := run.NS("golden")
	files, err := filepath.Glob(filepath.Join("testdata", "*.golden"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			text, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if out, err := ns.RunInput(string(text), "nft", "-c", "-f", "-"); err != nil {
				t.Fatalf("nft -c: %v\n%s", err, out)
			}
			for i := 0; i < 2; i++ {
				if out, err := ns.RunInput(string(text), "nft", "-f", "-"); err != nil {
					t.Fatalf("nft -f (load %d): %v\n%s", i+1, err, out)
				}
			}
			out := ns.MustRun("nft", "list", "tables")
			if strings.Count(out+"\n", "table ip "+Table+"\n") != 1 && !strings.Contains(f, "startup-gate") {
				t.Fatalf("want exactly one table ip %s after two loads, got:\n%s", Table, out)
			}
		})
	}
}

// TestDropCounters: every subnet of a peer, as the ruleset attributes it, has its element in
// the peer's drops, in and out, named after the set of its prefix length.
func TestDropCounters(t *testing.T) {
	g := labGateway()
	got, err := DropCounters(g)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]PeerDrops{
		"peer-a": {In: []string{"drops_in_28 203.0.113.0"}, Out: []string{"drops_out_28 203.0.113.0"}},
		"peer-b": {In: []string{"drops_in_29 203.0.113.16"}, Out: []string{"drops_out_29 203.0.113.16"}},
		"peer-c": {In: []string{"drops_in_27 203.0.113.32"}, Out: []string{"drops_out_27 203.0.113.32"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DropCounters = %+v, want %+v", got, want)
	}
	text := mustRender(t, g, libipsec(g))
	for _, d := range got {
		for _, name := range append(slices.Clone(d.In), d.Out...) {
			set, _, _ := strings.Cut(name, " ")
			if !strings.Contains(text, "\tset "+set+" {\n\t\ttype ipv4_addr\n\t\tflags dynamic\n\t\tcounter\n\t}\n") {
				t.Errorf("%s: the ruleset has no dynamic counting set %s", name, set)
			}
		}
	}
	g.Peers = append(g.Peers, g.Peers[0])
	if _, err := DropCounters(g); err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Errorf("a peer listed twice: %v", err)
	}
}

// TestGrantClasses: peers granted the same ports share a class, whose id depends on the ports
// alone; a peer granted nothing is in class 0; fwd_grants holds each class's ports once.
func TestGrantClasses(t *testing.T) {
	g := benchGateway(6) // all granted iperf, the even ones web too
	p, err := newPlan(g, libipsec(g))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.classes) != 2 {
		t.Fatalf("%d classes, want 2: %+v", len(p.classes), p.classes)
	}
	for i, c := range p.peerClass {
		if c != p.peerClass[i%2] {
			t.Errorf("peer %d is in class %s, peer %d in %s", i, classID(c), i%2, classID(p.peerClass[i%2]))
		}
	}
	if p.peerClass[0] == p.peerClass[1] {
		t.Error("peers granted different ports share a class")
	}
	text := mustRender(t, g, libipsec(g))
	if n := strings.Count(text, " . 100.64.7.10 . tcp . 5201"); n != 2 {
		t.Errorf("iperf's port is in fwd_grants %d times, want once per class (2)", n)
	}

	// More peers, fewer, a dark one: the classes keep their ids.
	more := benchGateway(40)
	more.Peers[3].Authorization = model.Decision{Reason: "Dark"}
	for i := range more.Exposures {
		more.Exposures[i].GrantedTo = slices.DeleteFunc(more.Exposures[i].GrantedTo, func(n string) bool { return n == more.Peers[3].Name })
	}
	q, err := newPlan(more, libipsec(more))
	if err != nil {
		t.Fatal(err)
	}
	if q.peerClass[0] != p.peerClass[0] || q.peerClass[1] != p.peerClass[1] {
		t.Errorf("class ids moved: %s %s, were %s %s", classID(q.peerClass[0]), classID(q.peerClass[1]), classID(p.peerClass[0]), classID(p.peerClass[1]))
	}
	if q.peerClass[3] != noClass {
		t.Errorf("a peer granted nothing is in class %s", classID(q.peerClass[3]))
	}
}

// TestClassIDs: ids are the port list's hash unless that is taken: a list whose hash another
// list has (FNV-1a: "costarring" and "liquid") moves on to the next value, the lists taken in
// order whatever order they come in; 0 and the flow marks are never an id.
func TestClassIDs(t *testing.T) {
	a := classIDs([]string{"liquid", "costarring", "zinke"})
	b := classIDs([]string{"zinke", "costarring", "liquid"})
	if a[1] != 0x5e4daa9d || a[0] != 0x5e4daa9e || b[1] != a[1] || b[2] != a[0] || b[0] != a[2] {
		t.Errorf("classIDs = %08x, %08x", a, b)
	}
	for _, id := range append(a, b...) {
		if id == noClass || id == MarkForward || id == MarkReverse {
			t.Errorf("id %08x is reserved", id)
		}
	}
}

func safeIdent(s string) bool {
	if len(s) == 0 || len(s) > 255 || !(s[0] >= 'a' && s[0] <= 'z') {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

func TestPartition(t *testing.T) {
	type c = claim
	p := func(s string, owner int, auth bool) claim { return c{prefix: pfx(s), owner: owner, authorized: auth} }
	for _, tc := range []struct {
		name   string
		claims []claim
		want   []string
	}{
		{"disjoint", []claim{p("203.0.113.16/28", 1, true), p("203.0.113.0/28", 0, true)},
			[]string{"203.0.113.0/28=0", "203.0.113.16/28=1"}},
		{"adjacent same owner merge", []claim{p("203.0.113.0/28", 0, true), p("203.0.113.16/28", 0, true)},
			[]string{"203.0.113.0/27=0"}},
		{"nested same owner", []claim{p("203.0.113.0/24", 0, true), p("203.0.113.64/26", 0, true)},
			[]string{"203.0.113.0/24=0"}},
		{"more specific dark inside dark", []claim{p("203.0.113.0/24", 0, false), p("203.0.113.64/26", 1, false)},
			[]string{"203.0.113.0/26=0", "203.0.113.64/26=1", "203.0.113.128/25=0"}},
		{"authorized beats more specific dark", []claim{p("203.0.113.0/24", 1, true), p("203.0.113.64/26", 0, false)},
			[]string{"203.0.113.0/24=1"}},
		{"authorized inside dark", []claim{p("203.0.113.0/24", 0, false), p("203.0.113.64/26", 1, true)},
			[]string{"203.0.113.0/26=0", "203.0.113.64/26=1", "203.0.113.128/25=0"}},
		{"same prefix: authorized, then name order", []claim{p("203.0.113.0/24", 1, false), p("203.0.113.0/24", 2, true), p("203.0.113.0/24", 0, false)},
			[]string{"203.0.113.0/24=2"}},
		{"same prefix both dark", []claim{p("203.0.113.0/24", 1, false), p("203.0.113.0/24", 0, false)},
			[]string{"203.0.113.0/24=0"}},
		{"everything and a hole at zero", []claim{p("0.0.0.0/0", 0, false), p("0.0.0.0/8", 1, false), p("255.255.255.255/32", 1, false)},
			[]string{"0.0.0.0/8=1", "1.0.0.0/8=0", "2.0.0.0/7=0", "4.0.0.0/6=0", "8.0.0.0/5=0", "16.0.0.0/4=0", "32.0.0.0/3=0", "64.0.0.0/2=0",
				"128.0.0.0/2=0", "192.0.0.0/3=0", "224.0.0.0/4=0", "240.0.0.0/5=0", "248.0.0.0/6=0", "252.0.0.0/7=0", "254.0.0.0/8=0",
				"255.0.0.0/9=0", "255.128.0.0/10=0", "255.192.0.0/11=0", "255.224.0.0/12=0", "255.240.0.0/13=0", "255.248.0.0/14=0",
				"255.252.0.0/15=0", "255.254.0.0/16=0", "255.255.0.0/17=0", "255.255.128.0/18=0", "255.255.192.0/19=0",
				"255.255.224.0/20=0", "255.255.240.0/21=0", "255.255.248.0/22=0", "255.255.252.0/23=0", "255.255.254.0/24=0",
				"255.255.255.0/25=0", "255.255.255.128/26=0", "255.255.255.192/27=0", "255.255.255.224/28=0", "255.255.255.240/29=0",
				"255.255.255.248/30=0", "255.255.255.252/31=0", "255.255.255.254/32=0", "255.255.255.255/32=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, o := range partition(tc.claims) {
				got = append(got, fmt.Sprintf("%s=%d", o.prefix, o.owner))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("partition:\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestRenderRefuses(t *testing.T) {
	base := func() *model.Gateway { return renderCases()[1].gw() } // multi-peer-mixed-grants
	for _, tc := range []struct {
		name   string
		mutate func(*model.Gateway, *Options)
		want   string
	}{
		{"routed mode", func(g *model.Gateway, _ *Options) { g.Mode = model.ModeRouted }, "only snat"},
		{"protocol", func(g *model.Gateway, _ *Options) { g.Protocol = "gre" }, "protocol"},
		{"cluster interface injection", func(_ *model.Gateway, o *Options) { o.ClusterInterface = `eth0" accept #` }, "not an interface name"},
		{"tunnel interface too long", func(_ *model.Gateway, o *Options) { o.TunnelInterface = "ipsec0123456789ab" }, "not an interface name"},
		{"same interfaces", func(_ *model.Gateway, o *Options) { o.TunnelInterface = "eth0" }, "both"},
		{"wireguard without interface", func(g *model.Gateway, o *Options) { g.Protocol = model.ProtocolWireGuard; o.TunnelInterface = "" }, "tunnel interface"},
		{"mtu", func(_ *model.Gateway, o *Options) { o.TunnelMTU = 100 }, "MTU"},
		{"port protocol injection", func(g *model.Gateway, _ *Options) { g.Exposures[0].Ports[0].Protocol = "tcp; drop" }, "not tcp or udp"},
		{"port zero", func(g *model.Gateway, _ *Options) { g.Exposures[0].Ports[0].TargetPort = 0 }, "must not be 0"},
		{"ipv6 virtual IP", func(g *model.Gateway, _ *Options) { g.Exposures[0].VirtualIP = addr("2001:db8::1") }, "IPv4"},
		{"no virtual IP", func(g *model.Gateway, _ *Options) { g.Exposures[0].VirtualIP = netip.Addr{} }, "IPv4"},
		{"virtual IP outside CIDR", func(g *model.Gateway, _ *Options) { g.Exposures[0].VirtualIP = addr("100.64.8.1") }, "outside the service CIDR"},
		{"multicast target", func(g *model.Gateway, _ *Options) { g.Exposures[0].Target = addr("224.0.0.1") }, "unicast"},
		{"duplicate port", func(g *model.Gateway, _ *Options) {
			g.Exposures[1].VirtualIP = g.Exposures[0].VirtualIP
			g.Exposures[1].Ports = g.Exposures[0].Ports
		}, "both use"},
		{"grant to unknown peer", func(g *model.Gateway, _ *Options) { g.Exposures[0].GrantedTo = []string{"ghost"} }, "does not have"},
		{"grant to dark peer", func(g *model.Gateway, _ *Options) { g.Peers[0].Authorization = modelgen.Dark(model.ReasonNoGrants, "") }, "not authorized"},
		{"ipv6 peer subnet", func(g *model.Gateway, _ *Options) { g.Peers[0].SourceCIDRs = []netip.Prefix{pfx("2001:db8::/64")} }, "IPv4"},
		{"duplicate peer", func(g *model.Gateway, _ *Options) { g.Peers[1].Name = g.Peers[0].Name }, "twice"},
		{"reverse target outside grantee", func(g *model.Gateway, _ *Options) {
			g.InternalSourceCIDRs = []netip.Prefix{pfx("198.51.100.0/24")}
			g.ReverseClients = []netip.Addr{addr("198.51.100.9")}
			g.ReverseExposures = []model.ReverseExposure{{Name: "r", VirtualIP: addr("100.64.7.20"), Target: addr("192.0.2.1"), Grantee: "vendor",
				Ports: []model.Port{{Protocol: "tcp", Port: 22, TargetPort: 22, GatewayPort: 20000}}}}
		}, "not inside the subnets"},
		{"reverse client outside the internal sources", func(g *model.Gateway, _ *Options) {
			g.InternalSourceCIDRs = []netip.Prefix{pfx("198.51.100.0/24")}
			g.ReverseClients = []netip.Addr{addr("192.0.2.9")}
			g.ReverseExposures = []model.ReverseExposure{{Name: "r", VirtualIP: addr("100.64.7.20"), Target: addr("198.51.100.5"), Grantee: "vendor",
				Ports: []model.Port{{Protocol: "tcp", Port: 22, TargetPort: 22, GatewayPort: 20000}}}}
		}, "outside the internal source CIDRs"},
		{"reverse without gateway port", func(g *model.Gateway, _ *Options) {
			g.InternalSourceCIDRs = []netip.Prefix{pfx("198.51.100.0/24")}
			g.ReverseClients = []netip.Addr{addr("198.51.100.9")}
			g.ReverseExposures = []model.ReverseExposure{{Name: "r", VirtualIP: addr("100.64.7.20"), Target: addr("198.51.100.5"), Grantee: "vendor",
				Ports: []model.Port{{Protocol: "tcp", Port: 22, TargetPort: 22}}}}
		}, "no gateway port"},
		{"reverse duplicate gateway port", func(g *model.Gateway, _ *Options) {
			g.InternalSourceCIDRs = []netip.Prefix{pfx("198.51.100.0/24")}
			g.ReverseClients = []netip.Addr{addr("198.51.100.9")}
			g.ReverseExposures = []model.ReverseExposure{{Name: "r", VirtualIP: addr("100.64.7.20"), Target: addr("198.51.100.5"), Grantee: "vendor",
				Ports: []model.Port{{Protocol: "tcp", Port: 22, TargetPort: 22, GatewayPort: 20000}, {Protocol: "udp", Port: 22, TargetPort: 22, GatewayPort: 20000}}}}
		}, "gateway port 20000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := base()
			o := libipsec(g)
			tc.mutate(g, &o)
			out, err := Render(g, o)
			if err == nil {
				t.Fatalf("Render succeeded; want an error containing %q\n%s", tc.want, out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

// TestHostileNames: names reach the ruleset only as sanitized identifiers and comments.
func TestHostileNames(t *testing.T) {
	g := renderCases()[1].gw()
	hostile := "x\" } } table ip evil { chain c { type filter hook input priority 0; policy drop; } } #\n"
	g.Namespace, g.Name = hostile, "\nflush ruleset\n"
	g.Exposures[0].Name = hostile
	g.Peers[0].Name = hostile
	g.Exposures[0].GrantedTo = []string{hostile, "branch-2"}
	g.Exposures[1].GrantedTo = []string{hostile, "vendor"}
	out := mustRender(t, g, libipsec(g))
	checkStructure(t, out)
	if strings.Contains(out, "evil") && !strings.Contains(out, "table-ip-evil") {
		t.Errorf("hostile name reached the ruleset unsanitized:\n%s", out)
	}
	nftCheck(t, out)
}

// checkStructure is a lexical check that needs no nft: every line is a known statement or a
// comment of safe characters, and quoted strings hold only identifiers.
func checkStructure(t testing.TB, text string) {
	t.Helper()
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		l := strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(l, "#"); ok {
			for _, r := range rest {
				if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(" ._-/:,;()`'<>+", r)) {
					t.Fatalf("line %d: comment holds %q: %q", i+1, r, line)
				}
			}
			continue
		}
		if strings.ContainsAny(l, "#;\\") && !strings.HasPrefix(l, "type ") {
			t.Fatalf("line %d: unexpected statement separator or comment: %q", i+1, line)
		}
		for j, q := range strings.Split(l, `"`) {
			if j%2 == 1 && !safeIdent(q) && !ifname.MatchString(q) {
				t.Fatalf("line %d: quoted string %q is not an identifier", i+1, q)
			}
		}
	}
	if strings.Count(text, "table ip ") != 3 || !strings.Contains(text, "\ndelete table ip bnerd_vpn\n") {
		t.Fatalf("the ruleset does not own exactly its table:\n%s", text)
	}
}

var (
	checkOnce sync.Once
	checkNS   *netns.NS
	checkErr  error
)

// nftCheck runs `nft -c -f` on the text in a namespace kept for the whole test binary (a dry
// run never changes it), when root and nft are available.
func nftCheck(t testing.TB, text string) {
	t.Helper()
	if netns.Available("nft") != nil {
		return
	}
	ns := sharedNS(t)
	if out, err := ns.RunInput(text, "nft", "-c", "-f", "-"); err != nil {
		t.Fatalf("nft -c: %v\n%s\n---\n%s", err, out, text)
	}
}

func sharedNS(t testing.TB) *netns.NS {
	checkOnce.Do(func() {
		name := fmt.Sprintf("bnftc%d-0-check", os.Getpid())
		if err := netns.Sweep("bnftc"); err != nil {
			checkErr = err
			return
		}
		if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
			checkErr = fmt.Errorf("ip netns add %s: %v: %s", name, err, out)
			return
		}
		checkNS = &netns.NS{Name: name}
	})
	if checkErr != nil {
		t.Fatal(checkErr)
	}
	return checkNS.WithT(t)
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if checkNS != nil {
		_ = exec.Command("ip", "netns", "del", checkNS.Name).Run()
	}
	os.Exit(code)
}

// TestLargeRuleset: thousands of peers render into few lines (nft parses a statement spread
// over many lines slowly from a file) and load from a file as well as from stdin.
func TestLargeRuleset(t *testing.T) {
	g := benchGateway(2000)
	text := mustRender(t, g, libipsec(g))
	p, err := newPlan(g, libipsec(g))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Count(text, "\n")
	if limit := 2*len(g.Peers) + p.elements()/packPer + 200; lines > limit {
		t.Errorf("%d lines for %d peers and %d elements; want at most %d", lines, len(g.Peers), p.elements(), limit)
	}
	checkStructure(t, text)
	if netns.Available("nft") != nil {
		return
	}
	ns := sharedNS(t)
	nftCheck(t, text)
	path := filepath.Join(t.TempDir(), "ruleset.nft")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	ns.MustRun("nft", "-f", path)
	checkLoaded(t, g, false, ns.MustRun("nft", "-j", "list", "table", Family, Table))
}

// TestEmptyGateway: no peers, no exposures is still a valid, closed ruleset.
func TestEmptyGateway(t *testing.T) {
	g := ipsecGateway("empty", nil, nil)
	out := mustRender(t, g, libipsec(g))
	checkStructure(t, out)
	nftCheck(t, out)
	if !strings.Contains(out, "policy drop;") {
		t.Error("forward chain is not policy drop")
	}
}

// Every set keyed by a peer subnet is one set per prefix length, and each is consulted by the
// rules that consult the whole, with the address masked to exactly its length: a length
// without its rule would leave its peers' addresses unmatched (ungranted, uncounted).
func TestEverySubnetSetIsConsulted(t *testing.T) {
	want := map[string]struct {
		fields []string
		rules  int
	}{
		// peer: the grant class of a new flow's source, and the drops from and toward a subnet
		// in forward, input_tunnel and output_tunnel
		SetPeer:          {[]string{"ip saddr", "ip daddr"}, 5},
		SetDropsIn:       {[]string{"ip saddr"}, 2},
		SetDropsOut:      {[]string{"ip daddr"}, 2},
		SetTunnelSources: {[]string{"ip saddr"}, 1},
	}
	for _, tc := range renderCases() {
		g := tc.gw()
		opts := []Options{libipsec(g)}
		if g.Protocol == model.ProtocolIPsec {
			opts = append(opts, kernelESP(g))
		} else {
			opts = []Options{DefaultOptions(g, true)}
		}
		for _, o := range opts {
			text := mustRender(t, g, o)
			l, err := Split(text)
			if err != nil {
				t.Fatal(err)
			}
			lengths := map[string][]int{}
			for _, s := range l.Sets {
				base, bits, ok := cutLength(s.Name)
				if !ok {
					continue
				}
				lengths[base] = append(lengths[base], bits)
				w := want[base]
				ref := "@" + s.Name
				var consulting []string
				for _, line := range strings.Split(l.Structure, "\n") {
					if strings.HasSuffix(line, ref) || strings.Contains(line, ref+" ") {
						consulting = append(consulting, line)
					}
				}
				if len(consulting) != w.rules {
					t.Errorf("%s: set %s is consulted by %d rules, want %d:\n%s", tc.name, s.Name, len(consulting), w.rules, strings.Join(consulting, "\n"))
				}
				for _, line := range consulting {
					keyed := slices.ContainsFunc(w.fields, func(f string) bool { return strings.Contains(line, masked(f, bits)+" ") })
					if !keyed || (bits < 32 && strings.Count(line, " & ") != strings.Count(line, " & "+maskOf(bits)+" ")) {
						t.Errorf("%s: %q does not key set %s by %v masked to /%d", tc.name, line, s.Name, w.fields, bits)
					}
				}
			}
			// the peers' own subnets: each length has its sets
			for _, p := range g.Peers {
				for _, s := range p.SourceCIDRs {
					if !slices.Contains(lengths[SetPeer], s.Bits()) && !coveredByAnother(g, p.Name, s) {
						t.Errorf("%s: peer %s's %s has no %s map", tc.name, p.Name, s, lengthName(SetPeer, s.Bits()))
					}
				}
			}
		}
	}
	if got := masked("ip saddr", 0); got != "ip saddr & 0.0.0.0" {
		t.Errorf("masked /0: %q", got)
	}
	if got := masked("ip daddr", 32); got != "ip daddr" {
		t.Errorf("masked /32: %q", got)
	}
	if got := masked("ip saddr", 20); got != "ip saddr & 255.255.240.0" {
		t.Errorf("masked /20: %q", got)
	}
}

// coveredByAnother: s counts for another peer (an overlap resolved in that peer's favour).
func coveredByAnother(g *model.Gateway, name string, s netip.Prefix) bool {
	for _, q := range g.Peers {
		if q.Name == name {
			continue
		}
		for _, o := range q.SourceCIDRs {
			if o.Overlaps(s) {
				return true
			}
		}
	}
	return false
}
