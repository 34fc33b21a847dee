package ipam

import (
	"errors"
	"fmt"
	"math/rand"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
)

var (
	mp = netip.MustParsePrefix
	ma = netip.MustParseAddr
)

func mustPool(t testing.TB, prefix string, blockBits int) *Pool {
	t.Helper()
	p, err := NewPool(mp(prefix), blockBits)
	if err != nil {
		t.Fatalf("NewPool(%s, %d): %v", prefix, blockBits, err)
	}
	return p
}

func TestNewPoolValidation(t *testing.T) {
	tests := []struct {
		name      string
		prefix    netip.Prefix
		blockBits int
		wantErr   bool
	}{
		{"default", mp("100.64.0.0/10"), 24, false},
		{"block equals pool", mp("10.0.0.0/24"), 24, false},
		{"smallest block", mp("10.0.0.0/24"), 30, false},
		{"zero prefix", netip.Prefix{}, 24, true},
		{"host bits set", mp("10.0.0.1/16"), 24, true},
		{"ipv6", mp("fd00::/64"), 120, true},
		{"block larger than pool", mp("10.0.0.0/16"), 15, true},
		{"block too small", mp("10.0.0.0/16"), 31, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPool(tt.prefix, tt.blockBits)
			if (err != nil) != tt.wantErr {
				t.Fatalf("NewPool err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && p == nil {
				t.Fatal("NewPool returned nil pool without error")
			}
		})
	}
}

type claim struct {
	owner string
	cidr  string
}

func TestAllocateOrder(t *testing.T) {
	tests := []struct {
		name      string
		pool      string
		blockBits int
		claims    []claim
		allocate  []string
		want      []string // "" means ErrExhausted
	}{
		{
			name: "lowest first", pool: "10.0.0.0/16", blockBits: 24,
			allocate: []string{"a", "b", "c"},
			want:     []string{"10.0.0.0/24", "10.0.1.0/24", "10.0.2.0/24"},
		},
		{
			name: "claimed /23 blocks two /24s", pool: "10.0.0.0/16", blockBits: 24,
			claims:   []claim{{"user", "10.0.0.0/23"}},
			allocate: []string{"a", "b"},
			want:     []string{"10.0.2.0/24", "10.0.3.0/24"},
		},
		{
			name: "claimed /23 in the middle", pool: "10.0.0.0/16", blockBits: 24,
			claims:   []claim{{"user", "10.0.2.0/23"}},
			allocate: []string{"a", "b", "c", "d"},
			want:     []string{"10.0.0.0/24", "10.0.1.0/24", "10.0.4.0/24", "10.0.5.0/24"},
		},
		{
			name: "small claim blocks its whole block", pool: "10.0.0.0/16", blockBits: 24,
			claims:   []claim{{"u1", "10.0.0.16/28"}, {"u2", "10.0.1.128/25"}},
			allocate: []string{"a"},
			want:     []string{"10.0.2.0/24"},
		},
		{
			name: "gap between claims is used", pool: "10.0.0.0/16", blockBits: 24,
			claims:   []claim{{"u1", "10.0.1.0/24"}},
			allocate: []string{"a", "b"},
			want:     []string{"10.0.0.0/24", "10.0.2.0/24"},
		},
		{
			name: "user CIDR outside the pool covering it blocks everything", pool: "10.0.4.0/22", blockBits: 24,
			claims:   []claim{{"user", "10.0.0.0/21"}},
			allocate: []string{"a"},
			want:     []string{""},
		},
		{
			name: "disjoint user CIDR outside the pool blocks nothing", pool: "10.0.0.0/22", blockBits: 24,
			claims:   []claim{{"user", "192.168.0.0/16"}, {"user2", "10.0.4.0/24"}},
			allocate: []string{"a"},
			want:     []string{"10.0.0.0/24"},
		},
		{
			name: "non-default block size", pool: "10.0.0.0/24", blockBits: 26,
			claims:   []claim{{"u", "10.0.0.64/27"}},
			allocate: []string{"a", "b", "c", "d"},
			want:     []string{"10.0.0.0/26", "10.0.0.128/26", "10.0.0.192/26", ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPool(t, tt.pool, tt.blockBits)
			for _, c := range tt.claims {
				if err := p.Claim(c.owner, mp(c.cidr)); err != nil {
					t.Fatalf("Claim(%s, %s): %v", c.owner, c.cidr, err)
				}
			}
			for i, owner := range tt.allocate {
				got, err := p.Allocate(owner)
				if tt.want[i] == "" {
					if !errors.Is(err, ErrExhausted) {
						t.Fatalf("Allocate(%s) = %v, %v; want ErrExhausted", owner, got, err)
					}
					continue
				}
				if err != nil || got != mp(tt.want[i]) {
					t.Fatalf("Allocate(%s) = %v, %v; want %s", owner, got, err, tt.want[i])
				}
			}
		})
	}
}

func TestAllocateIdempotent(t *testing.T) {
	p := mustPool(t, "10.0.0.0/16", 24)
	first, err := p.Allocate("a")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		again, err := p.Allocate("a")
		if err != nil || again != first {
			t.Fatalf("Allocate(a) again = %v, %v; want %v", again, err, first)
		}
	}
	if b, _ := p.Allocate("b"); b != mp("10.0.1.0/24") {
		t.Fatalf("Allocate(b) = %v; repeated allocations for a must not use blocks", b)
	}
	// An owner holding a claimed CIDR (even outside the pool) gets it back.
	if err := p.Claim("user", mp("192.168.10.0/24")); err != nil {
		t.Fatal(err)
	}
	if got, err := p.Allocate("user"); err != nil || got != mp("192.168.10.0/24") {
		t.Fatalf("Allocate(user) = %v, %v; want its claim", got, err)
	}
	if got, ok := p.Lookup("a"); !ok || got != first {
		t.Fatalf("Lookup(a) = %v, %v", got, ok)
	}
	if _, ok := p.Lookup("nobody"); ok {
		t.Fatal("Lookup(nobody) reported a holding")
	}
}

func TestReleaseAndReuse(t *testing.T) {
	p := mustPool(t, "10.0.0.0/16", 24)
	for _, o := range []string{"a", "b", "c"} {
		if _, err := p.Allocate(o); err != nil {
			t.Fatal(err)
		}
	}
	p.Release("b")
	p.Release("b") // idempotent
	p.Release("never-held")
	if _, ok := p.Lookup("b"); ok {
		t.Fatal("b still holds a CIDR after Release")
	}
	if got, _ := p.Allocate("d"); got != mp("10.0.1.0/24") {
		t.Fatalf("Allocate(d) = %v; want b's released 10.0.1.0/24", got)
	}
	if got, _ := p.Allocate("e"); got != mp("10.0.3.0/24") {
		t.Fatalf("Allocate(e) = %v; want 10.0.3.0/24", got)
	}
	p.Release("a")
	if got, _ := p.Allocate("f"); got != mp("10.0.0.0/24") {
		t.Fatalf("Allocate(f) = %v; want a's released 10.0.0.0/24", got)
	}
	// Released claims free their blocks too.
	if err := p.Claim("user", mp("10.0.8.0/22")); err != nil {
		t.Fatal(err)
	}
	if got, _ := p.Allocate("g"); got != mp("10.0.4.0/24") {
		t.Fatalf("Allocate(g) = %v", got)
	}
	for _, o := range []string{"h", "i", "j"} {
		p.Allocate(o)
	}
	if got, _ := p.Allocate("k"); got != mp("10.0.12.0/24") {
		t.Fatalf("Allocate(k) = %v; want 10.0.12.0/24 past the claim", got)
	}
	p.Release("user")
	if got, _ := p.Allocate("l"); got != mp("10.0.8.0/24") {
		t.Fatalf("Allocate(l) = %v; want 10.0.8.0/24 from the released claim", got)
	}
}

func TestExhaustion(t *testing.T) {
	p := mustPool(t, "10.0.0.0/22", 24)
	var got []netip.Prefix
	for i := 0; i < 4; i++ {
		c, err := p.Allocate(fmt.Sprint("gw", i))
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		got = append(got, c)
	}
	want := []netip.Prefix{mp("10.0.0.0/24"), mp("10.0.1.0/24"), mp("10.0.2.0/24"), mp("10.0.3.0/24")}
	if !slices.Equal(got, want) {
		t.Fatalf("allocations = %v; want %v", got, want)
	}
	for i := 0; i < 2; i++ {
		if c, err := p.Allocate("extra"); !errors.Is(err, ErrExhausted) {
			t.Fatalf("fifth allocation = %v, %v; want ErrExhausted", c, err)
		}
	}
	if _, ok := p.Lookup("extra"); ok {
		t.Fatal("failed allocation left a holding")
	}
	p.Release("gw2")
	if c, err := p.Allocate("extra"); err != nil || c != mp("10.0.2.0/24") {
		t.Fatalf("after release: %v, %v; want 10.0.2.0/24", c, err)
	}
}

func TestClaim(t *testing.T) {
	tests := []struct {
		name         string
		before       []claim
		owner, cidr  string
		zero         bool // claim the zero prefix instead of cidr
		wantConflict string
		wantErr      bool
		wantHeld     string // what owner holds afterwards; "" means nothing
	}{
		{name: "free", owner: "a", cidr: "10.0.0.0/24", wantHeld: "10.0.0.0/24"},
		{name: "host bits set", owner: "a", cidr: "10.0.0.1/24", wantErr: true},
		{name: "ipv6", owner: "a", cidr: "fd00::/64", wantErr: true},
		{name: "zero", owner: "a", zero: true, wantErr: true},
		{
			name: "overlaps a smaller CIDR", before: []claim{{"other", "10.0.1.0/26"}},
			owner: "a", cidr: "10.0.0.0/23", wantConflict: "other",
		},
		{
			name: "inside a bigger CIDR", before: []claim{{"big", "10.0.0.0/16"}},
			owner: "a", cidr: "10.0.3.0/24", wantConflict: "big",
		},
		{
			name: "failed claim keeps the old one", before: []claim{{"a", "10.1.0.0/24"}, {"other", "10.0.0.0/24"}},
			owner: "a", cidr: "10.0.0.0/24", wantConflict: "other", wantHeld: "10.1.0.0/24",
		},
		{
			name: "same owner same cidr", before: []claim{{"a", "10.0.0.0/24"}},
			owner: "a", cidr: "10.0.0.0/24", wantHeld: "10.0.0.0/24",
		},
		{
			name: "same owner replaces", before: []claim{{"a", "10.0.0.0/24"}},
			owner: "a", cidr: "172.16.0.0/24", wantHeld: "172.16.0.0/24",
		},
		{
			name: "same owner grows over its own CIDR", before: []claim{{"a", "10.0.0.0/24"}},
			owner: "a", cidr: "10.0.0.0/23", wantHeld: "10.0.0.0/23",
		},
		{
			name: "adjacent is fine", before: []claim{{"other", "10.0.0.0/24"}},
			owner: "a", cidr: "10.0.1.0/24", wantHeld: "10.0.1.0/24",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPool(t, "10.0.0.0/16", 24)
			for _, c := range tt.before {
				if err := p.Claim(c.owner, mp(c.cidr)); err != nil {
					t.Fatalf("setup Claim(%s, %s): %v", c.owner, c.cidr, err)
				}
			}
			var cidr netip.Prefix
			if !tt.zero {
				cidr = netip.MustParsePrefix(tt.cidr)
			}
			err := p.Claim(tt.owner, cidr)
			var ce *ConflictError
			switch {
			case tt.wantConflict != "":
				if !errors.As(err, &ce) {
					t.Fatalf("Claim = %v; want *ConflictError", err)
				}
				if ce.Owner != tt.wantConflict || ce.CIDR != cidr || !strings.Contains(err.Error(), tt.wantConflict) {
					t.Fatalf("conflict = %+v (%v); want holder %s", ce, err, tt.wantConflict)
				}
				if held, _ := p.Lookup(tt.wantConflict); ce.Held != held {
					t.Fatalf("conflict Held = %v; holder holds %v", ce.Held, held)
				}
			case tt.wantErr:
				if err == nil || errors.As(err, &ce) {
					t.Fatalf("Claim = %v; want a validation error", err)
				}
			default:
				if err != nil {
					t.Fatalf("Claim: %v", err)
				}
			}
			held, ok := p.Lookup(tt.owner)
			if tt.wantHeld == "" {
				if ok {
					t.Fatalf("%s holds %v; want nothing", tt.owner, held)
				}
			} else if !ok || held != mp(tt.wantHeld) {
				t.Fatalf("%s holds %v, %v; want %s", tt.owner, held, ok, tt.wantHeld)
			}
		})
	}
}

func TestClaimReplaceFreesOldBlock(t *testing.T) {
	p := mustPool(t, "10.0.0.0/16", 24)
	if _, err := p.Allocate("a"); err != nil { // 10.0.0.0/24
		t.Fatal(err)
	}
	if err := p.Claim("a", mp("192.168.0.0/24")); err != nil {
		t.Fatal(err)
	}
	if got, _ := p.Allocate("b"); got != mp("10.0.0.0/24") {
		t.Fatalf("Allocate(b) = %v; want a's old block", got)
	}
	if err := p.Claim("c", mp("10.0.0.0/24")); err == nil {
		t.Fatal("claim of b's block succeeded")
	}
}

func TestRebuild(t *testing.T) {
	tests := []struct {
		name      string
		seeds     []Seed
		want      map[string]string // owner -> held CIDR
		conflicts map[string]string // owner -> holder named in the ConflictError ("" = any error)
	}{
		{
			name: "assigned beats an earlier owner's request",
			seeds: []Seed{
				{Owner: "a", Requested: mp("10.0.0.0/24")},
				{Owner: "z", Assigned: mp("10.0.0.0/24")},
			},
			want:      map[string]string{"z": "10.0.0.0/24"},
			conflicts: map[string]string{"a": "z"},
		},
		{
			name: "assigned beats an overlapping request",
			seeds: []Seed{
				{Owner: "z", Assigned: mp("10.0.1.0/24"), Requested: mp("10.0.1.0/24")},
				{Owner: "a", Requested: mp("10.0.0.0/23")},
				{Owner: "b", Requested: mp("10.0.4.0/24")},
			},
			want:      map[string]string{"z": "10.0.1.0/24", "b": "10.0.4.0/24"},
			conflicts: map[string]string{"a": "z"},
		},
		{
			name: "assigned wins over own differing request",
			seeds: []Seed{
				{Owner: "a", Assigned: mp("10.0.0.0/24"), Requested: mp("10.0.9.0/24")},
				{Owner: "b", Requested: mp("10.0.9.0/24")},
			},
			want: map[string]string{"a": "10.0.0.0/24", "b": "10.0.9.0/24"},
		},
		{
			name: "overlapping assigned: first owner by name wins",
			seeds: []Seed{
				{Owner: "y", Assigned: mp("10.0.0.0/23")},
				{Owner: "x", Assigned: mp("10.0.1.0/24")},
			},
			want:      map[string]string{"x": "10.0.1.0/24"},
			conflicts: map[string]string{"y": "x"},
		},
		{
			name: "invalid assigned counts as none",
			seeds: []Seed{
				{Owner: "a", Assigned: netip.PrefixFrom(ma("10.0.0.5"), 24), Requested: mp("10.0.3.0/24")},
				{Owner: "b"},
			},
			want: map[string]string{"a": "10.0.3.0/24"},
		},
		{
			name: "invalid request is reported",
			seeds: []Seed{
				{Owner: "a", Requested: netip.PrefixFrom(ma("10.0.0.5"), 24)},
			},
			want:      map[string]string{},
			conflicts: map[string]string{"a": ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The outcome must not depend on seed order.
			for _, seeds := range [][]Seed{tt.seeds, reversed(tt.seeds)} {
				p := mustPool(t, "10.0.0.0/16", 24)
				if _, err := p.Allocate("stale"); err != nil { // replaced by Rebuild
					t.Fatal(err)
				}
				conflicts := p.Rebuild(seeds)
				if len(conflicts) != len(tt.conflicts) {
					t.Fatalf("conflicts = %v; want owners %v", conflicts, tt.conflicts)
				}
				for owner, holder := range tt.conflicts {
					err := conflicts[owner]
					if err == nil {
						t.Fatalf("no conflict for %s: %v", owner, conflicts)
					}
					var ce *ConflictError
					if holder != "" && (!errors.As(err, &ce) || ce.Owner != holder) {
						t.Fatalf("conflict for %s = %v; want held by %s", owner, err, holder)
					}
				}
				for _, s := range seeds {
					held, ok := p.Lookup(s.Owner)
					want, wantOK := tt.want[s.Owner]
					if ok != wantOK || (ok && held != mp(want)) {
						t.Fatalf("%s holds %v, %v; want %q", s.Owner, held, ok, want)
					}
				}
				if _, ok := p.Lookup("stale"); ok {
					t.Fatal("Rebuild kept a holding not in the seeds")
				}
			}
		})
	}
}

func reversed(s []Seed) []Seed {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}

func TestConcurrentAllocate(t *testing.T) {
	p := mustPool(t, "10.0.0.0/16", 24)
	if err := p.Claim("user", mp("10.0.7.0/24")); err != nil {
		t.Fatal(err)
	}
	const n = 200
	results := make([]netip.Prefix, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			owner := fmt.Sprint("gw-", i)
			results[i], errs[i] = p.Allocate(owner)
			if i%3 == 0 { // mix in idempotent calls and lookups
				again, _ := p.Allocate(owner)
				if again != results[i] {
					errs[i] = fmt.Errorf("re-allocate gave %v, first %v", again, results[i])
				}
				p.Lookup(owner)
			}
		}()
	}
	close(start)
	wg.Wait()
	all := []netip.Prefix{mp("10.0.7.0/24")}
	for i := 0; i < n; i++ {
		if errs[i] != nil {
			t.Fatalf("gw-%d: %v", i, errs[i])
		}
		if results[i].Bits() != 24 || !mp("10.0.0.0/16").Contains(results[i].Addr()) {
			t.Fatalf("gw-%d got %v", i, results[i])
		}
		all = append(all, results[i])
	}
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			if all[i].Overlaps(all[j]) {
				t.Fatalf("%v overlaps %v", all[i], all[j])
			}
		}
	}
	// Lowest first: the 200 blocks are exactly 10.0.0.0/24 .. 10.0.200.0/24 minus the claim.
	slices.SortFunc(all, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	if last := all[len(all)-1]; last != mp("10.0.200.0/24") {
		t.Fatalf("highest block %v; want 10.0.200.0/24", last)
	}
}

// TestAllocateMatchesNaive drives random claims, allocations and releases and checks every
// allocation against a brute-force scan for the lowest free block.
func TestAllocateMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	pool := mp("10.0.0.0/20")
	p := mustPool(t, pool.String(), 24)
	owners := []string{}
	for step := 0; step < 3000; step++ {
		switch op := rng.Intn(10); {
		case op < 5:
			owner := fmt.Sprint("o", step)
			want := naiveLowest(p, pool, 24)
			got, err := p.Allocate(owner)
			if !want.IsValid() {
				if !errors.Is(err, ErrExhausted) {
					t.Fatalf("step %d: Allocate = %v, %v; want ErrExhausted", step, got, err)
				}
				continue
			}
			if err != nil || got != want {
				t.Fatalf("step %d: Allocate = %v, %v; want %v", step, got, err, want)
			}
			owners = append(owners, owner)
		case op < 8 && len(owners) > 0:
			i := rng.Intn(len(owners))
			p.Release(owners[i])
			owners = slices.Delete(owners, i, i+1)
		default:
			bits := 19 + rng.Intn(10)
			addr := netip.AddrFrom4([4]byte{10, 0, byte(rng.Intn(20)), byte(rng.Intn(256))})
			cidr := netip.PrefixFrom(addr, bits).Masked()
			owner := fmt.Sprint("c", step)
			if len(owners) > 0 && rng.Intn(2) == 0 {
				owner = owners[rng.Intn(len(owners))] // replace an existing holding
			}
			if err := p.Claim(owner, cidr); err == nil && !slices.Contains(owners, owner) {
				owners = append(owners, owner)
			}
		}
	}
}

func naiveLowest(p *Pool, pool netip.Prefix, blockBits int) netip.Prefix {
	p.mu.Lock()
	held := make([]netip.Prefix, 0, len(p.owners))
	for _, c := range p.owners {
		held = append(held, c)
	}
	p.mu.Unlock()
	lo, hi := bounds(pool)
	size := uint64(1) << (32 - blockBits)
	for c := lo; c+size-1 <= hi; c += size {
		b := netip.PrefixFrom(u32ToAddr(uint32(c)), blockBits)
		if !slices.ContainsFunc(held, b.Overlaps) {
			return b
		}
	}
	return netip.Prefix{}
}

func TestAssignAddresses(t *testing.T) {
	tests := []struct {
		name     string
		cidr     string
		reserved []string
		reqs     []AddressRequest
		want     map[string]string
		errs     map[string]string // name -> Reason
		// errNames: for each errored name, names its Detail must mention.
		errNames map[string][]string
	}{
		{
			name: "requested honoured, rest lowest free",
			cidr: "10.0.0.0/24",
			reqs: []AddressRequest{{Name: "a"}, {Name: "b", Requested: ma("10.0.0.1")}, {Name: "c"}},
			want: map[string]string{"a": "10.0.0.2", "b": "10.0.0.1", "c": "10.0.0.3"},
		},
		{
			name: "previous kept",
			cidr: "10.0.0.0/24",
			reqs: []AddressRequest{{Name: "a"}, {Name: "b", Previous: ma("10.0.0.7")}, {Name: "c", Previous: ma("10.0.0.1")}},
			want: map[string]string{"a": "10.0.0.2", "b": "10.0.0.7", "c": "10.0.0.1"},
		},
		{
			name: "previous outside a new cidr is reassigned",
			cidr: "10.0.1.0/24",
			reqs: []AddressRequest{{Name: "a", Previous: ma("10.0.0.5")}, {Name: "b", Previous: ma("10.0.1.1")}},
			want: map[string]string{"a": "10.0.1.2", "b": "10.0.1.1"},
		},
		{
			name: "previous taken by a request is reassigned",
			cidr: "10.0.0.0/24",
			reqs: []AddressRequest{{Name: "old", Previous: ma("10.0.0.5")}, {Name: "new", Requested: ma("10.0.0.5")}},
			want: map[string]string{"old": "10.0.0.1", "new": "10.0.0.5"},
		},
		{
			name: "two previous on one address: the later is reassigned",
			cidr: "10.0.0.0/24",
			reqs: []AddressRequest{{Name: "a", Previous: ma("10.0.0.1")}, {Name: "b", Previous: ma("10.0.0.1")}},
			want: map[string]string{"a": "10.0.0.1", "b": "10.0.0.2"},
		},
		{
			name: "previous on a reserved or network address is reassigned",
			cidr: "10.0.0.0/24", reserved: []string{"10.0.0.1"},
			reqs: []AddressRequest{{Name: "a", Previous: ma("10.0.0.1")}, {Name: "b", Previous: ma("10.0.0.0")}, {Name: "c", Previous: ma("10.0.0.255")}},
			want: map[string]string{"a": "10.0.0.2", "b": "10.0.0.3", "c": "10.0.0.4"},
		},
		{
			name: "conflicting requests: the later fails, naming both",
			cidr: "10.0.0.0/24",
			reqs: []AddressRequest{
				{Name: "first", Requested: ma("10.0.0.9")},
				{Name: "second", Requested: ma("10.0.0.9"), Previous: ma("10.0.0.3")},
				{Name: "third"},
			},
			want:     map[string]string{"first": "10.0.0.9", "third": "10.0.0.1"},
			errs:     map[string]string{"second": "Conflict"},
			errNames: map[string][]string{"second": {"first", "second"}},
		},
		{
			name: "reserved, network and broadcast requests",
			cidr: "10.0.0.0/24", reserved: []string{"10.0.0.1", "10.0.0.2"},
			reqs: []AddressRequest{
				{Name: "res", Requested: ma("10.0.0.1")},
				{Name: "net", Requested: ma("10.0.0.0")},
				{Name: "bcast", Requested: ma("10.0.0.255")},
				{Name: "free"},
			},
			want: map[string]string{"free": "10.0.0.3"},
			errs: map[string]string{"res": "Reserved", "net": "Reserved", "bcast": "Reserved"},
		},
		{
			name: "requested outside the cidr",
			cidr: "10.0.0.0/24",
			reqs: []AddressRequest{{Name: "a", Requested: ma("10.0.1.1")}, {Name: "b", Requested: ma("fd00::1")}},
			want: map[string]string{},
			errs: map[string]string{"a": "OutsideCIDR", "b": "OutsideCIDR"},
		},
		{
			name: "exhaustion in a /30",
			cidr: "192.168.5.0/30",
			reqs: []AddressRequest{{Name: "a"}, {Name: "b"}, {Name: "c"}},
			want: map[string]string{"a": "192.168.5.1", "b": "192.168.5.2"},
			errs: map[string]string{"c": "Exhausted"},
		},
		{
			name: "exhaustion in a /30 with a reservation and a request",
			cidr: "192.168.5.0/30", reserved: []string{"192.168.5.1"},
			reqs: []AddressRequest{{Name: "a"}, {Name: "b", Requested: ma("192.168.5.2")}},
			want: map[string]string{"b": "192.168.5.2"},
			errs: map[string]string{"a": "Exhausted"},
		},
		{
			name: "duplicate request name",
			cidr: "10.0.0.0/24",
			reqs: []AddressRequest{{Name: "a"}, {Name: "a", Requested: ma("10.0.0.5")}},
			want: map[string]string{"a": "10.0.0.1"},
			errs: map[string]string{"a": "Conflict"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cidr := mp(tt.cidr)
			var reserved []netip.Addr
			for _, r := range tt.reserved {
				reserved = append(reserved, ma(r))
			}
			got, errs := AssignAddresses(cidr, reserved, tt.reqs)
			want := map[string]netip.Addr{}
			for k, v := range tt.want {
				want[k] = ma(v)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("addresses = %v; want %v", got, want)
			}
			gotErrs := map[string]string{}
			for _, e := range errs {
				gotErrs[e.Name] = e.Reason
				for _, n := range tt.errNames[e.Name] {
					if !strings.Contains(e.Detail, n) {
						t.Errorf("%s error detail %q does not name %q", e.Name, e.Detail, n)
					}
				}
			}
			if len(tt.errs) == 0 {
				tt.errs = map[string]string{}
			}
			if !reflect.DeepEqual(gotErrs, tt.errs) {
				t.Fatalf("errors = %v; want %v", errs, tt.errs)
			}
			checkAddresses(t, cidr, reserved, got)
		})
	}
}

// checkAddresses asserts the invariants every assignment must hold.
func checkAddresses(t *testing.T, cidr netip.Prefix, reserved []netip.Addr, got map[string]netip.Addr) {
	t.Helper()
	seen := map[netip.Addr]string{}
	for name, a := range got {
		if !cidr.Contains(a) {
			t.Errorf("%s got %v outside %v", name, a, cidr)
		}
		if a == cidr.Masked().Addr() || a == lastAddr(cidr.Masked()) || slices.Contains(reserved, a) {
			t.Errorf("%s got reserved address %v", name, a)
		}
		if other, ok := seen[a]; ok {
			t.Errorf("%v given to both %s and %s", a, other, name)
		}
		seen[a] = name
	}
}

func TestAssignAddressesDeterministic(t *testing.T) {
	cidr := mp("10.20.0.0/26")
	reserved := []netip.Addr{ma("10.20.0.1"), ma("10.20.0.10")}
	rng := rand.New(rand.NewSource(7))
	var reqs []AddressRequest
	for i := 0; i < 70; i++ {
		r := AddressRequest{Name: fmt.Sprint("exp-", i)}
		switch rng.Intn(4) {
		case 0:
			r.Requested = netip.AddrFrom4([4]byte{10, 20, 0, byte(rng.Intn(70))})
		case 1:
			r.Previous = netip.AddrFrom4([4]byte{10, 20, 0, byte(rng.Intn(70))})
		}
		reqs = append(reqs, r)
	}
	orig := slices.Clone(reqs)
	first, firstErrs := AssignAddresses(cidr, reserved, reqs)
	if len(firstErrs) == 0 {
		t.Fatal("70 requests in a /26 must exhaust it")
	}
	checkAddresses(t, cidr, reserved, first)
	for i := 0; i < 20; i++ {
		got, errs := AssignAddresses(cidr, reserved, reqs)
		if !reflect.DeepEqual(got, first) || !reflect.DeepEqual(errs, firstErrs) {
			t.Fatalf("run %d differs from the first", i)
		}
	}
	if !slices.Equal(reqs, orig) {
		t.Fatal("AssignAddresses modified its input")
	}
	// Feeding the result back as Previous keeps every address (stability across reconciles).
	for i := range reqs {
		if a, ok := first[reqs[i].Name]; ok && !reqs[i].Requested.IsValid() {
			reqs[i].Previous = a
		}
	}
	again, _ := AssignAddresses(cidr, reserved, reqs)
	for name, a := range first {
		if again[name] != a {
			t.Fatalf("%s moved from %v to %v", name, a, again[name])
		}
	}
}

func BenchmarkAllocate(b *testing.B) {
	const owners = 10000
	names := make([]string, owners+1)
	for i := range names {
		names[i] = fmt.Sprint("gateway-", i)
	}
	b.Run("fill-10k", func(b *testing.B) {
		for b.Loop() {
			p := mustPool(b, "100.64.0.0/10", 24)
			for _, n := range names[:owners] {
				if _, err := p.Allocate(n); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("churn-at-10k", func(b *testing.B) {
		p := mustPool(b, "100.64.0.0/10", 24)
		for _, n := range names[:owners] {
			if _, err := p.Allocate(n); err != nil {
				b.Fatal(err)
			}
		}
		rng := rand.New(rand.NewSource(1))
		spare := names[owners]
		for b.Loop() {
			i := rng.Intn(owners)
			p.Release(names[i])
			if _, err := p.Allocate(spare); err != nil {
				b.Fatal(err)
			}
			names[i], spare = spare, names[i]
		}
	})
}
