package nft

import (
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen/modelgen"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// benchGateway has n authorized peers, each one /30 out of 100.96.0.0/11; every peer may reach
// the iperf exposure, every other peer the web exposure, and the first one holds a reverse
// exposure. Peer 0's subnet is 100.96.0.0/30, where the benchmark's client lives.
func benchGateway(n int) *model.Gateway {
	g := ipsecGateway("bench", nil, []model.Exposure{
		{Name: "iperf", VirtualIP: addr("100.64.7.10"), Target: addr("192.0.2.10"), Ports: []model.Port{tcp(5201, 5201)}},
		{Name: "web", VirtualIP: addr("100.64.7.11"), Target: addr("192.0.2.20"), Ports: []model.Port{tcp(443, 443), udp(443, 443)}},
	})
	base := netip.MustParseAddr("100.96.0.0").As4()
	start := uint32(base[0])<<24 | uint32(base[1])<<16
	for i := 0; i < n; i++ {
		a := start + uint32(i)*4
		name := fmt.Sprintf("site-%05d", i)
		p := ipsecPeer(name, modelgen.Authorized(), []string{"iperf"},
			netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}), 30).String())
		g.Exposures[0].GrantedTo = append(g.Exposures[0].GrantedTo, name)
		if i%2 == 0 {
			p.Exposures = append(p.Exposures, "web")
			g.Exposures[1].GrantedTo = append(g.Exposures[1].GrantedTo, name)
		}
		g.Peers = append(g.Peers, p)
	}
	g.Peers[0].ReverseExposures = []string{"console"}
	g.InternalSourceCIDRs = []netip.Prefix{pfx("198.51.100.0/24")}
	g.ReverseClients = []netip.Addr{addr("198.51.100.10")}
	g.ReverseExposures = []model.ReverseExposure{{Name: "console", VirtualIP: addr("100.64.7.20"), Target: addr("100.96.0.1"), Grantee: g.Peers[0].Name,
		Ports: []model.Port{{Protocol: "tcp", Port: 22, TargetPort: 22, GatewayPort: 20000}}}}
	return g
}

type benchRow struct {
	peers           int
	elements        int
	render          time.Duration
	apply, applyCPU time.Duration
	replace         time.Duration
	throughput      []float64 // Gbit/s per round
}

// BenchmarkRuleset prints, for 10, 1,000 and 10,000 peers: render time, atomic apply time in a
// fresh namespace (wall and CPU of the nft process) and of a replace, and forwarding
// throughput of one TCP stream through a virtual IP with that ruleset loaded (iperf3, rounds
// interleaved across the sizes so machine noise hits them alike). Needs root, nft and iperf3
// for everything but the render time. Bounded: about a minute.
func BenchmarkRuleset(b *testing.B) {
	sizes := []int{10, 1000, 10000}
	rows := make([]*benchRow, len(sizes))
	texts := make([]string, len(sizes))
	for i, n := range sizes {
		g := benchGateway(n)
		o := libipsec(g)
		r := &benchRow{peers: n, render: time.Hour}
		for k := 0; k < 3; k++ {
			t0 := time.Now()
			text, err := Render(g, o)
			if d := time.Since(t0); d < r.render {
				r.render = d
			}
			if err != nil {
				b.Fatal(err)
			}
			texts[i] = text
		}
		pl, err := newPlan(g, o)
		if err != nil {
			b.Fatal(err)
		}
		r.elements = pl.elements()
		rows[i] = r
	}

	network := netns.Available("nft", "iperf3")
	if network == nil {
		run := netns.NewRun(b, "bnftb")
		for i, r := range rows {
			ns := run.NS(fmt.Sprintf("apply%d", r.peers))
			r.apply, r.applyCPU = timedApply(b, ns, texts[i])
			r.replace, _ = timedApply(b, ns, texts[i])
		}

		gw, peer, backend := run.NS("gw"), run.NS("peer"), run.NS("backend")
		netns.Veth(gw, labTunnel, peer, "eth0")
		netns.Veth(gw, labCluster, backend, "eth0")
		gw.MustRun("ip", "addr", "add", "100.64.7.1/32", "dev", labTunnel)
		gw.MustRun("ip", "route", "add", "100.96.0.0/11", "dev", labTunnel)
		gw.MustRun("ip", "addr", "add", "192.0.2.1/24", "dev", labCluster)
		peer.MustRun("ip", "addr", "add", "100.96.0.2/30", "dev", "eth0")
		peer.MustRun("ip", "route", "add", "100.64.7.0/24", "via", "100.64.7.1", "dev", "eth0", "onlink")
		backend.MustRun("ip", "addr", "add", "192.0.2.10/24", "dev", "eth0")
		gw.Sysctl("net.ipv4.ip_forward", "1")
		backend.Start("iperf3", "-s")

		for round := 0; round < 2; round++ {
			for i, r := range rows {
				if out, err := gw.RunInput(texts[i], "nft", "-f", "-"); err != nil {
					b.Fatalf("load %d peers: %v\n%s", r.peers, err, out)
				}
				r.throughput = append(r.throughput, iperf(b, peer, "100.64.7.10"))
			}
		}
	}

	fmt.Printf("\nnftables ruleset, %d CPUs (goals: apply <= 50 ms at 10,000 peers; throughput ratio 10,000 vs 10 >= 0.9)\n", runtime.NumCPU())
	fmt.Printf("%8s %9s %10s %12s %12s %12s %s\n", "peers", "elements", "render", "apply fresh", "apply CPU", "replace", "TCP through virtual IP (Gbit/s per round)")
	for _, r := range rows {
		fmt.Printf("%8d %9d %10s %12s %12s %12s %s\n", r.peers, r.elements, ms(r.render), ms(r.apply), ms(r.applyCPU), ms(r.replace), gbits(r.throughput))
		b.ReportMetric(float64(r.render.Microseconds())/1000, fmt.Sprintf("render-ms/%dpeers", r.peers))
		if network == nil {
			b.ReportMetric(float64(r.apply.Microseconds())/1000, fmt.Sprintf("apply-ms/%dpeers", r.peers))
			b.ReportMetric(best(r.throughput), fmt.Sprintf("Gbit/s/%dpeers", r.peers))
		}
	}
	if network != nil {
		fmt.Printf("apply and throughput not measured: %v\n", network)
		return
	}
	ratio := best(rows[2].throughput) / best(rows[0].throughput)
	fmt.Printf("throughput ratio 10,000 vs 10 peers (best rounds): %.2f\n", ratio)
	b.ReportMetric(ratio, "throughput-ratio-10k/10")
}

// timedApply loads the ruleset with one nft -f and returns wall time and the nft process's CPU
// time (user+system, which includes the kernel's work on the batch).
func timedApply(b *testing.B, ns *netns.NS, text string) (wall, cpu time.Duration) {
	b.Helper()
	cmd := ns.Command(b.Context(), "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(text)
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	wall = time.Since(t0)
	if err != nil {
		b.Fatalf("nft -f: %v\n%s", err, out)
	}
	return wall, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// iperf runs one 3-second TCP stream (the first second omitted) and returns Gbit/s received.
func iperf(b *testing.B, ns *netns.NS, server string) float64 {
	b.Helper()
	res, err := ns.Iperf3(server, "-t", "2", "-O", "1")
	if err != nil {
		b.Fatal(err)
	}
	return res.BitsPerSecond / 1e9
}

func best(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}

func gbits(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, " / ")
}
