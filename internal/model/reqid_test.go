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
	got := allocReqids([]string{"old", "new", "newest"}, same)
	want := map[string]uint32{"old": LastReqid, "new": FirstReqid, "newest": FirstReqid + 1}
	for n, r := range want {
		if got[n] != r {
			t.Errorf("%s: reqid %d, want %d", n, got[n], r)
		}
	}
	t.Logf("clash resolved oldest first: %v", got)
}
