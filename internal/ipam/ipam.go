// Package ipam allocates gateways' service CIDRs from the operator's pool and virtual IPs
// inside a service CIDR. Status is the source of truth: the pool is rebuilt from it at start,
// already-assigned gateways first.
package ipam

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
)

// ErrExhausted: no free block of the requested size is left in the pool.
var ErrExhausted = errors.New("pool exhausted")

// ConflictError: the requested CIDR overlaps one held by another owner.
type ConflictError struct {
	CIDR  netip.Prefix
	Owner string // the owner holding the overlapping CIDR
	Held  netip.Prefix
}

func (e *ConflictError) Error() string {
	return e.CIDR.String() + " overlaps " + e.Held.String() + " held by " + e.Owner
}

// Pool hands out fixed-size blocks (a /24 by default) of a prefix to owners, and tracks any
// other CIDRs owners claim (user-chosen service CIDRs, possibly outside the pool) so nothing
// overlaps. Safe for concurrent use.
type Pool struct {
	mu        sync.Mutex
	prefix    netip.Prefix
	blockBits int
	lo, hi    uint64 // first and last address of the pool prefix
	blockSize uint64
	owners    map[string]netip.Prefix
	// spans holds every owner's CIDR as an address range, sorted by lo. Claims never overlap
	// (overlaps are rejected), so the ranges are disjoint and their his are sorted too.
	spans []span
	// hint: every block-aligned candidate in [lo, hint) is known not to be free, so Allocate
	// starts its scan there. Allocations raise it; releases lower it.
	hint uint64
}

// NewPool returns an empty pool over prefix handing out blocks of the given prefix length.
func NewPool(prefix netip.Prefix, blockBits int) (*Pool, error) {
	if err := validV4Prefix(prefix); err != nil {
		return nil, fmt.Errorf("pool prefix: %w", err)
	}
	if blockBits < prefix.Bits() || blockBits > 30 {
		return nil, fmt.Errorf("block size /%d: must be between /%d (the pool's size) and /30", blockBits, prefix.Bits())
	}
	lo, hi := bounds(prefix)
	return &Pool{
		prefix:    prefix,
		blockBits: blockBits,
		lo:        lo,
		hi:        hi,
		blockSize: 1 << (32 - blockBits),
		owners:    make(map[string]netip.Prefix),
		hint:      lo,
	}, nil
}

// Claim records that owner holds cidr (from status or spec). Idempotent for the same owner
// and cidr; an owner holds at most one CIDR, so a different cidr replaces the owner's old one.
// Returns *ConflictError when cidr overlaps another owner's.
func (p *Pool) Claim(owner string, cidr netip.Prefix) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.claim(owner, cidr)
}

// Allocate returns owner's CIDR, allocating the lowest free block when it holds none.
// Returns ErrExhausted when no block is free.
func (p *Pool) Allocate(owner string) (netip.Prefix, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if held, ok := p.owners[owner]; ok {
		return held, nil
	}
	c, ok := p.lowestFree()
	if !ok {
		return netip.Prefix{}, ErrExhausted
	}
	cidr := netip.PrefixFrom(u32ToAddr(uint32(c)), p.blockBits)
	p.insert(owner, cidr)
	p.hint = c + p.blockSize
	return cidr, nil
}

// Release frees whatever owner holds. Idempotent.
func (p *Pool) Release(owner string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.release(owner)
}

// Lookup returns what owner holds.
func (p *Pool) Lookup(owner string) (netip.Prefix, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cidr, ok := p.owners[owner]
	return cidr, ok
}

// Holdings returns every owner's CIDR (a copy).
func (p *Pool) Holdings() map[string]netip.Prefix {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.owners)
}

// HolderOf returns the owner whose CIDR contains a, other than except, and that CIDR.
func (p *Pool) HolderOf(a netip.Addr, except string) (owner string, cidr netip.Prefix, ok bool) {
	if !a.Is4() {
		return "", netip.Prefix{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	v := uint64(addrToU32(a))
	if s := p.overlapping(v, v, except); s != nil {
		return s.owner, s.cidr, true
	}
	return "", netip.Prefix{}, false
}

// Seed is one gateway's known addresses when the pool is rebuilt.
type Seed struct {
	Owner string
	// Assigned is status.serviceCIDR (live: clients may depend on it); may be invalid/zero.
	Assigned netip.Prefix
	// Requested is spec.serviceCIDR; may be zero.
	Requested netip.Prefix
}

// Rebuild claims every seed's Assigned CIDR first, then Requested ones, so an address a
// client already uses is never taken by someone else. Returns the conflicts found, by owner.
//
// Rebuild replaces whatever the pool held before. Seeds are processed sorted by owner, so the
// outcome does not depend on their order. An owner with an Assigned CIDR is never given its
// Requested one here, and an owner whose claim failed holds nothing. An Assigned that is not
// a masked IPv4 CIDR counts as none (it cannot be live); a bad Requested one is reported.
func (p *Pool) Rebuild(seeds []Seed) map[string]error {
	sorted := slices.Clone(seeds)
	slices.SortStableFunc(sorted, func(a, b Seed) int { return cmp.Compare(a.Owner, b.Owner) })

	p.mu.Lock()
	defer p.mu.Unlock()
	p.owners = make(map[string]netip.Prefix)
	p.spans = nil
	p.hint = p.lo

	conflicts := make(map[string]error)
	hasAssigned := func(s Seed) bool { return validV4Prefix(s.Assigned) == nil }
	for _, s := range sorted {
		if !hasAssigned(s) {
			continue
		}
		if err := p.claim(s.Owner, s.Assigned); err != nil {
			p.release(s.Owner)
			conflicts[s.Owner] = err
		}
	}
	for _, s := range sorted {
		if hasAssigned(s) || !s.Requested.IsValid() {
			continue
		}
		if err := p.claim(s.Owner, s.Requested); err != nil {
			p.release(s.Owner)
			conflicts[s.Owner] = err
		}
	}
	return conflicts
}

// AddressRequest asks for one address in a service CIDR.
type AddressRequest struct {
	Name string
	// Requested is a user-chosen address (spec); zero when none.
	Requested netip.Addr
	// Previous is the address assigned before (status); kept when still valid and free.
	Previous netip.Addr
}

// AddressError is one request that could not be satisfied.
type AddressError struct {
	Name   string
	Reason string // "OutsideCIDR", "Conflict", "Reserved", "Exhausted"
	Detail string
}

func (e AddressError) Error() string { return e.Name + ": " + e.Detail }

// AssignAddresses gives each request an address in cidr, pure and deterministic: requested
// addresses first (must be inside cidr, not reserved, not taken by another request), then
// previous assignments that are still free, then the lowest free host addresses. The network
// and broadcast addresses and the reserved ones are never handed out.
//
// A request whose Requested address cannot be given gets an error and no address: it does not
// fall back to its Previous address or a free one. A request whose name repeats an earlier
// one's gets a "Conflict" error. Errors are returned in reqs order.
func AssignAddresses(cidr netip.Prefix, reserved []netip.Addr, reqs []AddressRequest) (map[string]netip.Addr, []AddressError) {
	return assignAddresses(cidr, reserved, reqs)
}
