package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
)

// span is one owner's CIDR as an inclusive address range.
type span struct {
	lo, hi uint64
	owner  string
	cidr   netip.Prefix
}

func validV4Prefix(p netip.Prefix) error {
	switch {
	case !p.IsValid():
		return errors.New("invalid or empty CIDR")
	case !p.Addr().Is4():
		return fmt.Errorf("%s is not an IPv4 CIDR", p)
	case p != p.Masked():
		return fmt.Errorf("%s has host bits set (did you mean %s?)", p, p.Masked())
	}
	return nil
}

func addrToU32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func u32ToAddr(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// bounds returns the first and last address of a valid, masked IPv4 prefix.
func bounds(p netip.Prefix) (lo, hi uint64) {
	lo = uint64(addrToU32(p.Addr()))
	return lo, lo + (uint64(1) << (32 - p.Bits())) - 1
}

// claim is Claim without locking.
func (p *Pool) claim(owner string, cidr netip.Prefix) error {
	if err := validV4Prefix(cidr); err != nil {
		return fmt.Errorf("claim by %s: %w", owner, err)
	}
	if old, ok := p.owners[owner]; ok && old == cidr {
		return nil
	}
	lo, hi := bounds(cidr)
	if other := p.overlapping(lo, hi, owner); other != nil {
		return &ConflictError{CIDR: cidr, Owner: other.owner, Held: other.cidr}
	}
	p.release(owner)
	p.insert(owner, cidr)
	return nil
}

// overlapping returns a span overlapping [lo, hi] not held by except, or nil.
func (p *Pool) overlapping(lo, hi uint64, except string) *span {
	i := sort.Search(len(p.spans), func(i int) bool { return p.spans[i].hi >= lo })
	// Spans are disjoint and except holds at most one, so at most two need checking.
	for ; i < len(p.spans) && p.spans[i].lo <= hi; i++ {
		if p.spans[i].owner != except {
			return &p.spans[i]
		}
	}
	return nil
}

// insert records cidr for owner; the caller has checked it overlaps nothing.
func (p *Pool) insert(owner string, cidr netip.Prefix) {
	lo, hi := bounds(cidr)
	i := sort.Search(len(p.spans), func(i int) bool { return p.spans[i].lo > lo })
	p.spans = slices.Insert(p.spans, i, span{lo: lo, hi: hi, owner: owner, cidr: cidr})
	p.owners[owner] = cidr
}

// release is Release without locking.
func (p *Pool) release(owner string) {
	cidr, ok := p.owners[owner]
	if !ok {
		return
	}
	delete(p.owners, owner)
	lo, _ := bounds(cidr)
	i := sort.Search(len(p.spans), func(i int) bool { return p.spans[i].lo >= lo })
	if i < len(p.spans) && p.spans[i].owner == owner {
		p.spans = slices.Delete(p.spans, i, i+1)
	}
	// Blocks from the one containing lo upwards may be free again.
	if down := lo &^ (p.blockSize - 1); down < p.hint {
		p.hint = max(down, p.lo)
	}
}

// lowestFree returns the start of the lowest block-aligned block of the pool that overlaps no
// span. It walks the spans from the hint once, jumping past each span in the way.
func (p *Pool) lowestFree() (uint64, bool) {
	c := max(p.hint, p.lo)
	i := sort.Search(len(p.spans), func(i int) bool { return p.spans[i].hi >= c })
	for c+p.blockSize-1 <= p.hi {
		for i < len(p.spans) && p.spans[i].hi < c {
			i++
		}
		if i == len(p.spans) || p.spans[i].lo > c+p.blockSize-1 {
			return c, true
		}
		c = (p.spans[i].hi + p.blockSize) &^ (p.blockSize - 1) // next block after the span
	}
	p.hint = c
	return 0, false
}

// lastAddr returns the last address of a valid, masked prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Addr()
	if a.Is4() {
		_, hi := bounds(p)
		return u32ToAddr(uint32(hi))
	}
	b := a.As16()
	for bit := p.Bits(); bit < 128; bit++ {
		b[bit/8] |= 0x80 >> (bit % 8)
	}
	return netip.AddrFrom16(b)
}

type indexedError struct {
	idx int
	err AddressError
}

func assignAddresses(cidr netip.Prefix, reserved []netip.Addr, reqs []AddressRequest) (map[string]netip.Addr, []AddressError) {
	out := make(map[string]netip.Addr, len(reqs))
	var errs []indexedError
	fail := func(i int, reason, detail string) {
		errs = append(errs, indexedError{i, AddressError{Name: reqs[i].Name, Reason: reason, Detail: detail}})
	}

	valid := cidr.IsValid()
	var network, broadcast netip.Addr
	if valid {
		cidr = cidr.Masked()
		network, broadcast = cidr.Addr(), lastAddr(cidr)
	}
	norm := func(a netip.Addr) netip.Addr {
		if valid && cidr.Addr().Is4() {
			return a.Unmap()
		}
		return a
	}
	reservedSet := make(map[netip.Addr]bool, len(reserved))
	for _, a := range reserved {
		reservedSet[norm(a)] = true
	}
	isReserved := func(a netip.Addr) bool { return a == network || a == broadcast || reservedSet[a] }
	taken := make(map[netip.Addr]string) // address -> request name holding it

	done := make([]bool, len(reqs))
	names := make(map[string]bool, len(reqs))
	for i, r := range reqs {
		if names[r.Name] {
			done[i] = true
			fail(i, "Conflict", fmt.Sprintf("duplicate request name %q", r.Name))
		}
		names[r.Name] = true
	}

	// Requested addresses first.
	for i, r := range reqs {
		if done[i] || !r.Requested.IsValid() {
			continue
		}
		done[i] = true
		a := norm(r.Requested)
		switch {
		case !valid || !cidr.Contains(a):
			fail(i, "OutsideCIDR", fmt.Sprintf("requested address %s is outside the service CIDR %s", a, cidr))
		case a == network:
			fail(i, "Reserved", fmt.Sprintf("requested address %s is the network address of %s", a, cidr))
		case a == broadcast:
			fail(i, "Reserved", fmt.Sprintf("requested address %s is the broadcast address of %s", a, cidr))
		case reservedSet[a]:
			fail(i, "Reserved", fmt.Sprintf("requested address %s is reserved", a))
		case taken[a] != "":
			fail(i, "Conflict", fmt.Sprintf("address %s is requested by both %q and %q", a, taken[a], r.Name))
		default:
			taken[a] = r.Name
			out[r.Name] = a
		}
	}

	// Then previous assignments that are still valid and free.
	for i, r := range reqs {
		if done[i] || !r.Previous.IsValid() {
			continue
		}
		a := norm(r.Previous)
		if valid && cidr.Contains(a) && !isReserved(a) && taken[a] == "" {
			done[i] = true
			taken[a] = r.Name
			out[r.Name] = a
		}
	}

	// Then the lowest free host addresses. Assignments only move the cursor up, so the host
	// range is walked once.
	var cursor netip.Addr
	if valid {
		cursor = network.Next()
	}
	for i, r := range reqs {
		if done[i] {
			continue
		}
		for cursor.IsValid() && cursor != broadcast && cidr.Contains(cursor) && (isReserved(cursor) || taken[cursor] != "") {
			cursor = cursor.Next()
		}
		if !cursor.IsValid() || cursor == broadcast || !cidr.Contains(cursor) {
			fail(i, "Exhausted", fmt.Sprintf("no free address left in %s", cidr))
			continue
		}
		taken[cursor] = r.Name
		out[r.Name] = cursor
		cursor = cursor.Next()
	}

	if len(errs) == 0 {
		return out, nil
	}
	slices.SortStableFunc(errs, func(a, b indexedError) int { return a.idx - b.idx })
	res := make([]AddressError, len(errs))
	for i, e := range errs {
		res[i] = e.err
	}
	return out, res
}
