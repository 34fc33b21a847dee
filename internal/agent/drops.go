package agent

import (
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
)

// Drop accounting. The ruleset counts a peer's drops per subnet, in elements of the drops sets
// the kernel makes at a subnet's first drop (nft.DropCounters); a peer's total is the sum of
// its subnets' elements. When a subnet changes hands or goes, its element is deleted so that
// its next owner counts from zero, and what it had counted stays with the peer that still
// exists (retired): a peer's drop counters never go down while it lives.

// dropTotals are packets and bytes of one peer dropped, in and out.
type dropTotals struct{ in, out nft.CounterValue }

func addCounts(a, b nft.CounterValue) nft.CounterValue {
	return nft.CounterValue{Packets: a.Packets + b.Packets, Bytes: a.Bytes + b.Bytes}
}

func sumOf(counters map[string]nft.CounterValue, names []string) nft.CounterValue {
	var v nft.CounterValue
	for _, n := range names {
		v = addCounts(v, counters[n])
	}
	return v
}

// staleDrops returns, by the peer that had them before, the drops elements whose subnet after
// gives to another peer or to none (before and after: nft.DropCounters of two models).
func staleDrops(before, after map[string]nft.PeerDrops) map[string]nft.PeerDrops {
	owner := map[string]string{}
	for peer, d := range after {
		for _, n := range d.In {
			owner[n] = peer
		}
		for _, n := range d.Out {
			owner[n] = peer
		}
	}
	stale := map[string]nft.PeerDrops{}
	for peer, d := range before {
		var s nft.PeerDrops
		for _, n := range d.In {
			if owner[n] != peer {
				s.In = append(s.In, n)
			}
		}
		for _, n := range d.Out {
			if owner[n] != peer {
				s.Out = append(s.Out, n)
			}
		}
		if len(s.In)+len(s.Out) > 0 {
			stale[peer] = s
		}
	}
	return stale
}
