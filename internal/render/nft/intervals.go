package nft

import (
	"cmp"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
)

// span is an inclusive IPv4 address range [lo, hi], held in uint64 so hi+1 never overflows.
type span struct{ lo, hi uint64 }

func spanOf(p netip.Prefix) span {
	a := p.Masked().Addr().As4()
	lo := uint64(a[0])<<24 | uint64(a[1])<<16 | uint64(a[2])<<8 | uint64(a[3])
	return span{lo: lo, hi: lo + (uint64(1) << (32 - p.Bits())) - 1}
}

func addr4(v uint64) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// prefixes splits a range into the fewest CIDRs that cover exactly it, in address order.
func (s span) prefixes() []netip.Prefix {
	var out []netip.Prefix
	for lo := s.lo; lo <= s.hi; {
		// The largest block aligned at lo...
		size := uint64(1) << 32
		if lo != 0 {
			size = uint64(1) << bits.TrailingZeros64(lo)
		}
		// ...that does not run past hi.
		for size > s.hi-lo+1 {
			size >>= 1
		}
		out = append(out, netip.PrefixFrom(addr4(lo), 32-bits.TrailingZeros64(size)))
		lo += size
	}
	return out
}

// coverPrefixes returns the prefixes whose union is that of ps, with every prefix contained in
// another one dropped, sorted by address. CIDRs either nest or are disjoint, so the result has
// no overlapping elements (what an nftables interval set requires).
func coverPrefixes(ps []netip.Prefix) []netip.Prefix {
	sorted := make([]netip.Prefix, len(ps))
	for i, p := range ps {
		sorted[i] = p.Masked()
	}
	slices.SortFunc(sorted, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits() // the larger block first
	})
	var out []netip.Prefix
	var last span
	for _, p := range sorted {
		s := spanOf(p)
		if len(out) > 0 && s.lo <= last.hi {
			continue // inside the previous kept prefix
		}
		out = append(out, p)
		last = s
	}
	return out
}

// mergedPrefixes is the union of ps as the fewest CIDRs (adjacent blocks merged), sorted.
func mergedPrefixes(ps []netip.Prefix) []netip.Prefix {
	var spans []span
	for _, p := range coverPrefixes(ps) {
		s := spanOf(p)
		if n := len(spans); n > 0 && spans[n-1].hi+1 == s.lo {
			spans[n-1].hi = s.hi
			continue
		}
		spans = append(spans, s)
	}
	var out []netip.Prefix
	for _, s := range spans {
		out = append(out, s.prefixes()...)
	}
	return out
}

// claim is one peer's claim on one of its subnets.
type claim struct {
	prefix netip.Prefix
	span   span
	owner  int // index of the peer in name order
	// authorized peers win over dark ones wherever subnets overlap.
	authorized bool
}

// better reports whether a takes precedence over b for the addresses both cover: an authorized
// peer over a dark one, then the more specific subnet, then the peer first in name order.
func (a *claim) better(b *claim) bool {
	if a.authorized != b.authorized {
		return a.authorized
	}
	if a.prefix.Bits() != b.prefix.Bits() {
		return a.prefix.Bits() > b.prefix.Bits()
	}
	return a.owner < b.owner
}

// owned is an address block attributed to one peer.
type owned struct {
	prefix netip.Prefix
	owner  int
}

// partition attributes every address covered by some claim to exactly one owner (see better),
// and returns the result as non-overlapping CIDRs in address order, adjacent blocks of the same
// owner merged. Runs in O(n log n).
func partition(claims []claim) []owned {
	cs := slices.Clone(claims)
	for i := range cs {
		cs[i].prefix = cs[i].prefix.Masked()
		cs[i].span = spanOf(cs[i].prefix)
	}
	slices.SortFunc(cs, func(a, b claim) int {
		if c := cmp.Compare(a.span.lo, b.span.lo); c != 0 {
			return c
		}
		if c := cmp.Compare(a.prefix.Bits(), b.prefix.Bits()); c != 0 {
			return c // the enclosing block first
		}
		if a.better(&b) {
			return -1
		}
		if b.better(&a) {
			return 1
		}
		return 0
	})

	type segment struct {
		span  span
		owner int
	}
	var segs []segment
	emit := func(lo, hi uint64, owner int) {
		if lo > hi {
			return
		}
		if n := len(segs); n > 0 && segs[n-1].owner == owner && segs[n-1].span.hi+1 == lo {
			segs[n-1].span.hi = hi
			return
		}
		segs = append(segs, segment{span{lo, hi}, owner})
	}

	// A sweep over nested-or-disjoint blocks: the stack holds the blocks enclosing the cursor,
	// each with the best claim among itself and its ancestors.
	type open struct {
		hi   uint64
		best *claim
	}
	var stack []open
	var cursor uint64
	closeUntil := func(lo uint64, all bool) {
		for len(stack) > 0 {
			top := stack[len(stack)-1]
			if !all && top.hi >= lo {
				return
			}
			emit(cursor, top.hi, top.best.owner)
			cursor = top.hi + 1
			stack = stack[:len(stack)-1]
		}
	}
	for i := range cs {
		c := &cs[i]
		if i > 0 && cs[i-1].prefix == c.prefix {
			continue // the same block claimed again: the first (best) claim holds
		}
		closeUntil(c.span.lo, false)
		best := c
		if n := len(stack); n > 0 {
			if c.span.lo > cursor {
				emit(cursor, c.span.lo-1, stack[n-1].best.owner)
			}
			if stack[n-1].best.better(c) {
				best = stack[n-1].best
			}
		}
		stack = append(stack, open{hi: c.span.hi, best: best})
		cursor = c.span.lo
	}
	closeUntil(0, true)

	var out []owned
	for _, s := range segs {
		for _, p := range s.span.prefixes() {
			out = append(out, owned{prefix: p, owner: s.owner})
		}
	}
	return out
}

// checkPrefix accepts a valid IPv4 prefix (host bits are masked off by the callers).
func checkPrefix(what string, p netip.Prefix) error {
	if !p.IsValid() || !p.Addr().Is4() {
		return fmt.Errorf("%s: %v is not an IPv4 CIDR", what, p)
	}
	return nil
}

// checkAddr accepts a unicast-looking IPv4 address.
func checkAddr(what string, a netip.Addr) error {
	if !a.IsValid() || !a.Is4() || a.IsUnspecified() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return fmt.Errorf("%s: %v is not a unicast IPv4 address", what, a)
	}
	return nil
}
