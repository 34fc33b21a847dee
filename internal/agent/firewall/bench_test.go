package firewall

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// benchSites are n authorized peers, one /30 each out of 100.96.0.0/11, all granted web and
// every other one db (the shape of the renderer's BenchmarkRuleset).
func benchSites(n int) []site {
	sites := make([]site, n)
	for i := range sites {
		a := 100<<24 | 96<<16 + uint32(i)*4
		sites[i] = site{
			name:    fmt.Sprintf("site-%05d", i),
			subnets: []string{fmt.Sprintf("%d.%d.%d.%d/30", a>>24, a>>16&255, a>>8&255, a&255)},
			grants:  []string{"web"},
		}
		if i%2 == 0 {
			sites[i].grants = append(sites[i].grants, "db")
		}
	}
	return sites
}

func benchGateway(sites []site) *model.Gateway { return testGateway("192.0.2.20", nil, sites...) }

// BenchmarkApply prints, for 10, 1,000 and 10,000 peers, what the agent's firewall spends to
// bring a table to a ruleset: the first load (Apply of the whole ruleset, `nft -f`, in a fresh
// namespace), and one-peer changes — a peer added, then removed again — each one Apply as the
// agent calls it (the new ruleset split, the diff, one netlink transaction) and, apart, its
// transaction; and a change of structure (a peer with a prefix length of its own), loaded whole
// into the table (nft.Reload), its transaction. Best of 5 rounds. Needs root and nft.
func BenchmarkApply(b *testing.B) {
	if err := netns.Available("nft"); err != nil {
		b.Skip(err)
	}
	ctx := context.Background()
	type row struct {
		peers                                      int
		load, add, remove, addTx, removeTx, reload time.Duration
	}
	best := func(d *time.Duration, v time.Duration) {
		if *d == 0 || v < *d {
			*d = v
		}
	}
	var rows []row
	run := netns.NewRun(b, "bfb")
	for _, n := range []int{10, 1000, 10000} {
		sites := benchSites(n + 1)
		base, more := render(b, benchGateway(sites[:n])), render(b, benchGateway(sites))
		// A peer with a prefix length no other has: its sets and rules are new structure.
		odd := site{name: "odd", subnets: []string{"198.51.100.0/29"}, grants: []string{"web"}}
		restructured := render(b, benchGateway(append(sites[:n:n], odd)))
		r := row{peers: n}
		for round := range 5 {
			ns := run.NS(fmt.Sprintf("p%d-%d", n, round))
			f := &Firewall{NFT: writeWrapper(b, ns.Name), NetNS: filepath.Join("/run/netns", ns.Name)}
			b.Cleanup(func() { _ = f.Close() })
			for _, step := range []struct {
				text    string
				path    applyPath
				all, tx *time.Duration
			}{{base, pathFull, nil, &r.load}, {more, pathDelta, &r.add, &r.addTx}, {base, pathDelta, &r.remove, &r.removeTx},
				{restructured, pathReload, nil, &r.reload}} {
				t0 := time.Now()
				if err := f.Apply(ctx, step.text); err != nil {
					b.Fatal(err)
				}
				if step.all != nil {
					best(step.all, time.Since(t0))
				}
				best(step.tx, f.lastTx)
				if f.last != step.path {
					b.Fatalf("%d peers: applied by path %d, want %d", n, f.last, step.path)
				}
			}
		}
		rows = append(rows, r)
	}
	breakdown(b, run, benchSites(10001))
	fmt.Printf("\nnftables apply, %d CPUs, best of 5 (goals at 10,000 peers: first load <= 100 ms, one-peer change <= 5 ms)\n", runtime.NumCPU())
	fmt.Printf("%8s %12s %14s %14s %16s %18s %20s\n", "peers", "first load", "peer added", "peer removed", "added (netlink)", "removed (netlink)", "structure (reload)")
	for _, r := range rows {
		fmt.Printf("%8d %12s %14s %14s %16s %18s %20s\n", r.peers, msec(r.load), msec(r.add), msec(r.remove), msec(r.addTx), msec(r.removeTx), msec(r.reload))
		b.ReportMetric(float64(r.load.Microseconds())/1000, fmt.Sprintf("load-ms/%dpeers", r.peers))
		b.ReportMetric(float64(r.add.Microseconds())/1000, fmt.Sprintf("peer-added-ms/%dpeers", r.peers))
		b.ReportMetric(float64(r.remove.Microseconds())/1000, fmt.Sprintf("peer-removed-ms/%dpeers", r.peers))
	}
}

func msec(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

// breakdown prints where the kernel's time goes in a one-peer change at 10,000 peers: the
// removal and the re-addition of the last peer, one transaction per set or map (and one for
// its counters), best of 5. It shows which kind of kernel set makes a change slow.
func breakdown(b *testing.B, run *netns.Run, sites []site) {
	n := len(sites) - 1
	more, err := nft.Split(render(b, benchGateway(sites)))
	if err != nil {
		b.Fatal(err)
	}
	base, err := nft.Split(render(b, benchGateway(sites[:n])))
	if err != nil {
		b.Fatal(err)
	}
	removal, ok := nft.Diff(more, base)
	if !ok {
		b.Fatal("no delta")
	}
	type part struct {
		what       string
		del, add   nft.Delta
		delT, addT time.Duration
	}
	var parts []*part
	for _, sd := range removal.Sets {
		kind := "hash"
		switch {
		case sd.Set.Interval && strings.Contains(sd.Set.Type, " . "):
			kind = "concatenated intervals (pipapo)"
		case sd.Set.Interval:
			kind = "intervals (rbtree)"
		}
		back := nft.SetDelta{Set: sd.Set, Add: sd.Del}
		parts = append(parts, &part{what: fmt.Sprintf("%s, %d element(s), %s", sd.Set.Name, len(sd.Del), kind),
			del: nft.Delta{Sets: []nft.SetDelta{sd}}, add: nft.Delta{Sets: []nft.SetDelta{back}}})
	}
	parts = append(parts, &part{what: fmt.Sprintf("%d named counter(s)", len(removal.DelCounters)),
		del: nft.Delta{DelCounters: removal.DelCounters}, add: nft.Delta{AddCounters: removal.DelCounters}})
	timed := func(f *Firewall, d nft.Delta, best *time.Duration) {
		t0 := time.Now()
		if err := f.delta(d); err != nil {
			b.Fatal(err)
		}
		if el := time.Since(t0); *best == 0 || el < *best {
			*best = el
		}
	}
	ns := run.NS(fmt.Sprintf("bd%d", n))
	f := &Firewall{NFT: writeWrapper(b, ns.Name), NetNS: filepath.Join("/run/netns", ns.Name)}
	b.Cleanup(func() { _ = f.Close() })
	if err := f.Apply(context.Background(), render(b, benchGateway(sites))); err != nil {
		b.Fatal(err)
	}
	for range 5 {
		for _, p := range parts { // elements go before the counters they name
			timed(f, p.del, &p.delT)
		}
		for i := len(parts) - 1; i >= 0; i-- {
			timed(f, parts[i].add, &parts[i].addT)
		}
	}
	fmt.Printf("\none-peer change at %d peers, one transaction per kernel object (best of 5): where the time goes\n", n)
	fmt.Printf("%-62s %10s %10s\n", "", "removed", "added")
	for _, p := range parts {
		fmt.Printf("%-62s %10s %10s\n", p.what, msec(p.delT), msec(p.addT))
	}
}
