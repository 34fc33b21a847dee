package firewall

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/netns"
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
// transaction. Best of 5 rounds. Needs root and nft.
func BenchmarkApply(b *testing.B) {
	if err := netns.Available("nft"); err != nil {
		b.Skip(err)
	}
	ctx := context.Background()
	type row struct {
		peers                              int
		load, add, remove, addTx, removeTx time.Duration
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
		r := row{peers: n}
		for round := range 5 {
			ns := run.NS(fmt.Sprintf("p%d-%d", n, round))
			f := &Firewall{NFT: writeWrapper(b, ns.Name), NetNS: filepath.Join("/run/netns", ns.Name)}
			b.Cleanup(func() { _ = f.Close() })
			for _, step := range []struct {
				text    string
				path    applyPath
				all, tx *time.Duration
			}{{base, pathFull, nil, &r.load}, {more, pathDelta, &r.add, &r.addTx}, {base, pathDelta, &r.remove, &r.removeTx}} {
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
	fmt.Printf("\nnftables apply, %d CPUs, best of 5 (goals at 10,000 peers: first load <= 100 ms, one-peer change <= 5 ms)\n", runtime.NumCPU())
	fmt.Printf("%8s %12s %14s %14s %16s %16s\n", "peers", "first load", "peer added", "peer removed", "added (netlink)", "removed (netlink)")
	for _, r := range rows {
		fmt.Printf("%8d %12s %14s %14s %16s %16s\n", r.peers, msec(r.load), msec(r.add), msec(r.remove), msec(r.addTx), msec(r.removeTx))
		b.ReportMetric(float64(r.load.Microseconds())/1000, fmt.Sprintf("load-ms/%dpeers", r.peers))
		b.ReportMetric(float64(r.add.Microseconds())/1000, fmt.Sprintf("peer-added-ms/%dpeers", r.peers))
		b.ReportMetric(float64(r.remove.Microseconds())/1000, fmt.Sprintf("peer-removed-ms/%dpeers", r.peers))
	}
}

func msec(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
