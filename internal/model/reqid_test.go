package model

import (
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// Reqids are the same on every build, in range, distinct per gateway, and a clash is resolved
// in favour of the older peer: adding a younger peer never moves an existing one.
func TestReqidsStableAndUnique(t *testing.T) {
	input := func() Input {
		return testInput(
			ipsecPeer("b", []string{"10.30.0.0/16"}, gen.Grants("metrics"), age(2)),
			ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants("metrics"), age(1)),
		)
	}
	first, errs := Build(input())
	if errs != nil {
		t.Fatal(errs)
	}
	again, _ := Build(input())
	seen := map[uint32]string{}
	for i, p := range first.Peers {
		r := p.IPsec.Reqid
		t.Logf("peer %s: reqid %d (0x%08x)", p.Name, r, r)
		if r < FirstReqid || r > LastReqid {
			t.Errorf("peer %s: reqid %d outside the range", p.Name, r)
		}
		if o, dup := seen[r]; dup {
			t.Errorf("peers %s and %s share reqid %d", o, p.Name, r)
		}
		seen[r] = p.Name
		if again.Peers[i].IPsec.Reqid != r {
			t.Errorf("peer %s: reqid %d, then %d on the next build", p.Name, r, again.Peers[i].IPsec.Reqid)
		}
		if r != PeerReqid("tenant", "gw", p.Name) {
			t.Errorf("peer %s: reqid %d is not its derived one", p.Name, r)
		}
	}
	if err := Verify(first); err != nil {
		t.Fatal(err)
	}
	dup := *first
	dup.Peers = append([]Peer(nil), first.Peers...)
	ip := *dup.Peers[1].IPsec
	ip.Reqid = dup.Peers[0].IPsec.Reqid
	dup.Peers[1].IPsec = &ip
	if err := Verify(&dup); err == nil {
		t.Error("Verify accepts two peers with one reqid")
	}
	ip.Reqid = 7
	if err := Verify(&dup); err == nil {
		t.Error("Verify accepts reqid 7 (outside the gateway range)")
	}
}

// Two peers preferring one value: the older keeps it, the younger takes the next free one,
// wrapping at the end of the range.
func TestReqidClashOlderPeerKeepsItsValue(t *testing.T) {
	same := func(string) uint32 { return LastReqid }
	got := allocReqids([]string{"old", "new", "newest"}, same, map[uint32]bool{})
	want := map[string]uint32{"old": LastReqid, "new": FirstReqid, "newest": FirstReqid + 1}
	for n, r := range want {
		if got[n] != r {
			t.Errorf("%s: reqid %d, want %d", n, got[n], r)
		}
	}
	t.Logf("clash resolved oldest first: %v", got)
}

// A peer with several subnets gets a reqid per subnet besides its own (its per-subnet
// CHILD_SAs), derived from the subnet: all distinct across the gateway, the peers' own reqids
// unmoved by them, a subnet's unmoved when the peer gains another; Verify refuses subnet reqids
// that do not match the subnets one to one or repeat another reqid.
func TestSubnetReqids(t *testing.T) {
	build := func(aSubnets ...string) *Gateway {
		g, errs := Build(testInput(
			ipsecPeer("a", aSubnets, gen.Grants("metrics"), age(1)),
			ipsecPeer("b", []string{"10.30.0.0/16"}, gen.Grants("metrics"), age(2)),
		))
		if errs != nil {
			t.Fatal(errs)
		}
		if err := Verify(g); err != nil {
			t.Fatal(err)
		}
		return g
	}
	peer := func(g *Gateway, name string) *Peer {
		for i := range g.Peers {
			if g.Peers[i].Name == name {
				return &g.Peers[i]
			}
		}
		t.Fatalf("no peer %s", name)
		return nil
	}
	one := build("10.20.0.0/24")
	if r := peer(one, "a").IPsec.SubnetReqids; r != nil {
		t.Errorf("a peer with one subnet has subnet reqids %v", r)
	}
	two := build("10.20.0.0/24", "10.21.0.0/24")
	three := build("10.20.0.0/24", "10.21.0.0/24", "10.22.0.0/24")
	a2, a3 := peer(two, "a"), peer(three, "a")
	t.Logf("peer a with three subnets: reqids %v", a3.IPsec.Reqids())
	if len(a3.IPsec.SubnetReqids) != 3 {
		t.Fatalf("three subnets, subnet reqids %v", a3.IPsec.SubnetReqids)
	}
	seen := map[uint32]bool{}
	for _, p := range three.Peers {
		for _, r := range p.IPsec.Reqids() {
			if seen[r] {
				t.Errorf("reqid %d twice: %v", r, three.Peers)
			}
			seen[r] = true
		}
	}
	for i, s := range a3.SourceCIDRs {
		if a3.IPsec.SubnetReqids[i] != SubnetReqid("tenant", "gw", "a", s) {
			t.Errorf("subnet %s: reqid %d is not its derived one", s, a3.IPsec.SubnetReqids[i])
		}
	}
	if a2.IPsec.SubnetReqids[0] != a3.IPsec.SubnetReqids[0] || a2.IPsec.SubnetReqids[1] != a3.IPsec.SubnetReqids[1] {
		t.Errorf("a third subnet moved the others' reqids: %v, then %v", a2.IPsec.SubnetReqids, a3.IPsec.SubnetReqids)
	}
	for _, g := range []*Gateway{one, two, three} {
		if peer(g, "a").IPsec.Reqid != PeerReqid("tenant", "gw", "a") || peer(g, "b").IPsec.Reqid != PeerReqid("tenant", "gw", "b") {
			t.Errorf("subnets moved a peer's own reqid: %v", g.Peers)
		}
	}

	for name, spoil := range map[string]func(ip *IPsecPeer){
		"one subnet reqid for three subnets": func(ip *IPsecPeer) { ip.SubnetReqids = ip.SubnetReqids[:1] },
		"a subnet reqid that is the peer's":  func(ip *IPsecPeer) { ip.SubnetReqids[2] = ip.Reqid },
		"a subnet reqid outside the range":   func(ip *IPsecPeer) { ip.SubnetReqids[0] = 9 },
	} {
		bad := build("10.20.0.0/24", "10.21.0.0/24", "10.22.0.0/24")
		p := peer(bad, "a")
		ip := *p.IPsec
		ip.SubnetReqids = append([]uint32(nil), ip.SubnetReqids...)
		spoil(&ip)
		p.IPsec = &ip
		if err := Verify(bad); err == nil {
			t.Errorf("Verify accepts %s", name)
		}
	}
}
