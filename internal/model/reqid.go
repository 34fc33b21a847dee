package model

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// Reqids bind a kernel-ESP gateway's grants to the tunnel a packet arrived through: each IPsec
// peer's CHILD_SA is installed with a fixed reqid (strongSwan's `reqid`), the kernel tags every
// packet it decrypts with the reqid of its SA, and the ruleset grants a packet only when that
// reqid is its peer's (nft `ipsec in reqid`). The gateway's rules match its own reqids only,
// so another IPsec user of the node (CNI encryption, a node VPN) is never caught by them.
//
// Reqids come from FirstReqid..LastReqid (0x40000001..0x7fffffff), far above what other IPsec
// users of a node pick: charon and libreswan allocate upward from 1 and 16384, Cilium and other
// CNIs use small fixed values. A peer's reqid is derived from its gateway's namespace and name
// and its own name (PeerReqid), so it is the same on every render, operator restart and gateway
// restart, and two gateways sharing a node (host network) practically never meet; within a
// gateway a clash is resolved oldest peer first (the next free value), so adding a peer never
// moves an existing one.
const (
	FirstReqid uint32 = 0x40000001
	LastReqid  uint32 = 0x7fffffff
)

// PeerReqid is the reqid a peer of a gateway gets unless an older peer of the same gateway
// already holds it.
func PeerReqid(gatewayNamespace, gatewayName, peerName string) uint32 {
	return hashReqid(gatewayNamespace + "/" + gatewayName + "/" + peerName)
}

// SubnetReqid is the reqid of a peer's per-subnet CHILD_SAs for one of its subnets unless
// another reqid of the gateway already is it.
func SubnetReqid(gatewayNamespace, gatewayName, peerName string, subnet netip.Prefix) uint32 {
	return hashReqid(gatewayNamespace + "/" + gatewayName + "/" + peerName + "/" + subnet.String())
}

func hashReqid(key string) uint32 {
	sum := sha256.Sum256([]byte(key))
	return FirstReqid + binary.BigEndian.Uint32(sum[:4])%(LastReqid-FirstReqid+1)
}

// assignReqids gives every IPsec peer of an ipsec gateway its reqid, oldest peer first.
func assignReqids(gw *vpnv1.VPNGateway, peers []vpnv1.VPNPeer, out *Gateway) {
	if out.Protocol != ProtocolIPsec {
		return
	}
	ordered := make([]*vpnv1.VPNPeer, len(peers))
	for i := range peers {
		ordered[i] = &peers[i]
	}
	slices.SortStableFunc(ordered, compareAge)
	names := make([]string, len(ordered))
	for i, p := range ordered {
		names[i] = p.Name
	}
	// The peers' reqids first, then their subnets': a peer's reqid does not move when another
	// peer gains subnets.
	taken := map[uint32]bool{}
	reqids := allocReqids(names, func(peer string) uint32 { return PeerReqid(gw.Namespace, gw.Name, peer) }, taken)
	byName := make(map[string]*Peer, len(out.Peers))
	for i := range out.Peers {
		if p := &out.Peers[i]; p.IPsec != nil {
			p.IPsec.Reqid = reqids[p.Name]
			byName[p.Name] = p
		}
	}
	var keys []string
	subnetOf := map[string]netip.Prefix{}
	for _, n := range names {
		p := byName[n]
		if p == nil || len(p.SourceCIDRs) < 2 {
			continue
		}
		for _, s := range p.SourceCIDRs {
			k := n + "/" + s.String()
			keys = append(keys, k)
			subnetOf[k] = s
		}
	}
	sub := allocReqids(keys, func(k string) uint32 {
		peer, _, _ := strings.Cut(k, "/")
		return SubnetReqid(gw.Namespace, gw.Name, peer, subnetOf[k])
	}, taken)
	for _, n := range names {
		p := byName[n]
		if p == nil || len(p.SourceCIDRs) < 2 {
			continue
		}
		p.IPsec.SubnetReqids = make([]uint32, len(p.SourceCIDRs))
		for i, s := range p.SourceCIDRs {
			p.IPsec.SubnetReqids[i] = sub[n+"/"+s.String()]
		}
	}
}

// allocReqids gives each name (oldest first) its preferred reqid, or the next free one after
// it when an older name or one already taken holds it; it adds what it gives to taken.
func allocReqids(oldestFirst []string, preferred func(string) uint32, taken map[uint32]bool) map[string]uint32 {
	out := make(map[string]uint32, len(oldestFirst))
	for _, n := range oldestFirst {
		if _, dup := out[n]; dup {
			continue // a name listed twice (Build refuses it)
		}
		r := preferred(n)
		for taken[r] {
			if r == LastReqid {
				r = FirstReqid
			} else {
				r++
			}
		}
		taken[r] = true
		out[n] = r
	}
	return out
}

// verifyReqids: every reqid an IPsec peer has is in the range and no other peer's (nor another
// of its own), and a peer's subnet reqids are one per subnet.
func verifyReqids(g *Gateway, bad func(string, ...any)) {
	seen := make(map[uint32]string)
	for _, p := range g.Peers {
		if p.IPsec == nil || p.IPsec.Reqid == 0 {
			if p.IPsec != nil && len(p.IPsec.SubnetReqids) > 0 {
				bad("peer %q: subnet reqids without a reqid", p.Name)
			}
			continue
		}
		if n := len(p.IPsec.SubnetReqids); n > 0 && n != len(p.SourceCIDRs) {
			bad("peer %q: %d subnet reqids for %d subnets", p.Name, n, len(p.SourceCIDRs))
		}
		for _, r := range p.IPsec.Reqids() {
			if r < FirstReqid || r > LastReqid {
				bad("peer %q: reqid %d is outside %d..%d", p.Name, r, FirstReqid, LastReqid)
			}
			if other, dup := seen[r]; dup {
				bad("peers %q and %q have the same reqid %d", other, p.Name, r)
			}
			seen[r] = p.Name
		}
	}
}

// ReqidError is why a peer has no usable reqid (for renderers that need one).
func ReqidError(p Peer) error {
	if p.IPsec == nil || p.IPsec.Reqid < FirstReqid || p.IPsec.Reqid > LastReqid {
		return fmt.Errorf("peer %q has no reqid in %d..%d (a model from an operator before reqids: it re-renders the gateway)", p.Name, FirstReqid, LastReqid)
	}
	return nil
}
