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
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
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
// bring a table to a ruleset: the whole first load (`nft -f`, in a fresh namespace), and a
// one-peer change — a peer added, then removed — applied as a delta: Apply in all (splitting
// both rulesets, the diff, the netlink transaction) and the transaction alone. Best of 5
// rounds each. Needs root and nft.
func BenchmarkApply(b *testing.B) {
	if err := netns.Available("nft"); err != nil {
		b.Skip(err)
	}
	ctx := context.Background()
	type row struct {
		peers                    int
		load, split, add, remove time.Duration
		addTx, removeTx          time.Duration
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
			t0 := time.Now()
			if err := f.load(ctx, base); err != nil {
				b.Fatal(err)
			}
			best(&r.load, time.Since(t0))
			l, _ := nft.Split(base)
			f.applied, f.layout = base, &l

			t0 = time.Now()
			if _, err := nft.Split(more); err != nil {
				b.Fatal(err)
			}
			best(&r.split, time.Since(t0))

			for _, step := range []struct {
				text    string
				all, tx *time.Duration
			}{{more, &r.add, &r.addTx}, {base, &r.remove, &r.removeTx}} {
				// The transaction alone, undone by its inverse; then Apply as the agent calls it.
				from, _ := nft.Split(f.applied)
				to, _ := nft.Split(step.text)
				d, _ := nft.Diff(from, to)
				undo, _ := nft.Diff(to, from)
				t0 = time.Now()
				if err := f.delta(d); err != nil {
					b.Fatal(err)
				}
				best(step.tx, time.Since(t0))
				if err := f.delta(undo); err != nil {
					b.Fatal(err)
				}
				f.last = pathNone
				t0 = time.Now()
				if err := f.Apply(ctx, step.text); err != nil {
					b.Fatal(err)
				}
				best(step.all, time.Since(t0))
				if f.last != pathDelta {
					b.Fatalf("%d peers: the change was not applied as a delta", n)
				}
			}
		}
		rows = append(rows, r)
	}
	fmt.Printf("\nnftables apply, %d CPUs, best of 5 (goals at 10,000 peers: first load <= 100 ms, one-peer change <= 5 ms)\n", runtime.NumCPU())
	fmt.Printf("%8s %14s %12s %14s %14s %16s %16s\n", "peers", "first load", "split", "peer added", "peer removed", "added (netlink)", "removed (netlink)")
	for _, r := range rows {
		fmt.Printf("%8d %14s %12s %14s %14s %16s %16s\n", r.peers, msec(r.load), msec(r.split), msec(r.add), msec(r.remove), msec(r.addTx), msec(r.removeTx))
		b.ReportMetric(float64(r.load.Microseconds())/1000, fmt.Sprintf("load-ms/%dpeers", r.peers))
		b.ReportMetric(float64(r.add.Microseconds())/1000, fmt.Sprintf("delta-ms/%dpeers", r.peers))
	}
}

func msec(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
