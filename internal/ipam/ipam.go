// Package ipam allocates gateways' service CIDRs from the operator's pool and virtual IPs
// inside a service CIDR. Status is the source of truth: the pool is rebuilt from it at start,
// already-assigned gateways first.
package ipam

import (
	"errors"
	"net/netip"
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
type Pool struct{ /* implemented by ipam helper */ }

// NewPool returns an empty pool over prefix handing out blocks of the given prefix length.
func NewPool(prefix netip.Prefix, blockBits int) (*Pool, error) { panic("TODO") }

// Claim records that owner holds cidr (from status or spec). Idempotent for the same owner
// and cidr; an owner holds at most one CIDR, so a different cidr replaces the owner's old one.
// Returns *ConflictError when cidr overlaps another owner's.
func (p *Pool) Claim(owner string, cidr netip.Prefix) error { panic("TODO") }

// Allocate returns owner's CIDR, allocating the lowest free block when it holds none.
// Returns ErrExhausted when no block is free.
func (p *Pool) Allocate(owner string) (netip.Prefix, error) { panic("TODO") }

// Release frees whatever owner holds. Idempotent.
func (p *Pool) Release(owner string) { panic("TODO") }

// Lookup returns what owner holds.
func (p *Pool) Lookup(owner string) (netip.Prefix, bool) { panic("TODO") }

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
func (p *Pool) Rebuild(seeds []Seed) map[string]error { panic("TODO") }

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
func AssignAddresses(cidr netip.Prefix, reserved []netip.Addr, reqs []AddressRequest) (map[string]netip.Addr, []AddressError) {
	panic("TODO")
}
