package model

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// fuzzBytes hands out bytes (zero once exhausted).
type fuzzBytes []byte

func (b *fuzzBytes) next() byte {
	if len(*b) == 0 {
		return 0
	}
	v := (*b)[0]
	*b = (*b)[1:]
	return v
}

func (b *fuzzBytes) pick(n int) int { return int(b.next()) % n }

var (
	fuzzSubnets = []string{"10.20.0.0/16", "10.20.0.0/24", "10.20.1.0/24", "10.30.0.0/16", "10.0.0.0/8",
		"192.168.0.0/24", "172.16.0.0/12", "10.20.0.5/32", "bogus", "10.20.0.1/16"}
	fuzzTargets = []string{"10.20.0.5", "10.20.1.9", "10.30.4.4", "192.168.0.10", "172.20.0.1", "not-an-ip"}
	fuzzNames   = []string{"e0", "e1", "e2", "r0", "r1", "r2", "zz"}
)

// fuzzGateway decodes a gateway and its peers from fuzz bytes.
func fuzzGateway(data []byte) (*vpnv1.VPNGateway, []vpnv1.VPNPeer) {
	b := fuzzBytes(data)
	proto := vpnv1.ProtocolIPsec
	if b.next()%2 == 1 {
		proto = vpnv1.ProtocolWireGuard
	}
	gw := testGateway(proto)
	gw.Spec.Exposures = gw.Spec.Exposures[:0]
	for i := range b.pick(4) {
		gw.Spec.Exposures = append(gw.Spec.Exposures, vpnv1.Exposure{Name: fmt.Sprintf("e%d", i),
			Target: vpnv1.ExposureTarget{Address: "100.70.0.1", Ports: vpnv1.Ports(vpnv1.PortSpec{Port: 80})}})
	}
	gw.Spec.ReverseExposures = nil
	for i := range b.pick(4) {
		gw.Spec.ReverseExposures = append(gw.Spec.ReverseExposures, vpnv1.ReverseExposure{Name: fmt.Sprintf("r%d", i),
			Target: vpnv1.ReverseExposureTarget{Address: fuzzTargets[b.pick(len(fuzzTargets))], Ports: vpnv1.Ports(vpnv1.PortSpec{Port: 22})}})
	}
	var peers []vpnv1.VPNPeer
	for i := range b.pick(6) {
		var subnets []string
		for range 1 + b.pick(3) {
			subnets = append(subnets, fuzzSubnets[b.pick(len(fuzzSubnets))])
		}
		name := fmt.Sprintf("p%d", i)
		kind := b.pick(8)
		var p vpnv1.VPNPeer
		switch {
		case kind == 0: // the other protocol
			if proto == vpnv1.ProtocolIPsec {
				p = wgPeer(name, subnets)
			} else {
				p = ipsecPeer(name, subnets)
			}
		case kind == 1: // neither section
			p = ipsecPeer(name, subnets)
			p.Spec.IPsec = nil
		case proto == vpnv1.ProtocolIPsec:
			p = ipsecPeer(name, subnets)
		default:
			p = wgPeer(name, subnets)
		}
		age(b.pick(4))(&p.ObjectMeta)
		switch b.pick(4) {
		case 0: // no block
		case 1:
			p.Spec.Authorization = &vpnv1.Authorization{}
		default:
			a := &vpnv1.Authorization{}
			for range b.pick(5) {
				n := fuzzNames[b.pick(len(fuzzNames))]
				if b.next()%2 == 0 {
					a.Exposures = append(a.Exposures, n)
				} else {
					a.ReverseExposures = append(a.ReverseExposures, n)
				}
			}
			p.Spec.Authorization = a
		}
		peers = append(peers, p)
	}
	return gw, peers
}

func FuzzAuthorize(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 2, 1, 0, 1, 1, 0, 2, 0, 0})
	f.Add([]byte{1, 3, 3, 0, 1, 3, 2, 1, 0, 3, 2, 3, 0, 4, 1, 3, 2, 0, 2, 3, 5, 1, 2, 2, 3, 3})
	f.Add([]byte{0, 1, 2, 0, 3, 2, 3, 0, 3, 2, 5, 1, 1, 0, 4, 0, 7, 2, 2, 1, 3, 1, 4, 1, 3, 3, 0, 0, 2, 2, 4, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		gw, peers := fuzzGateway(data)
		decisions, problems := Authorize(gw, peers, Scope{})
		checkAuthorizeInvariants(t, gw, peers, decisions)

		// Reversed order: the same outcome.
		rev := slices.Clone(peers)
		slices.Reverse(rev)
		d2, p2 := Authorize(gw, rev, Scope{})
		if fmt.Sprint(decisions) != fmt.Sprint(d2) || fmt.Sprint(problems) != fmt.Sprint(p2) {
			t.Fatalf("order changed the outcome:\n%v %v\n%v %v", decisions, problems, d2, p2)
		}

		in := testInput(peers...)
		in.Gateway = gw
		m, errs := Build(in)
		if errs != nil {
			if m != nil {
				t.Fatal("model returned with errors")
			}
			return // bogus subnets or targets
		}
		checkNoPartialGrants(t, in, m)
		for _, p := range m.Peers {
			if p.Authorization != decisions[p.Name] {
				t.Fatalf("peer %s: Build decision %+v differs from Authorize %+v", p.Name, p.Authorization, decisions[p.Name])
			}
		}
	})
}

// checkAuthorizeInvariants checks Authorize's decisions against the rules directly.
func checkAuthorizeInvariants(t *testing.T, gw *vpnv1.VPNGateway, peers []vpnv1.VPNPeer, decisions map[string]Decision) {
	t.Helper()
	var exps, revs []string
	targets := map[string]string{}
	for _, e := range gw.Spec.Exposures {
		exps = append(exps, e.Name)
	}
	for _, r := range gw.Spec.ReverseExposures {
		revs = append(revs, r.Name)
		targets[r.Name] = r.Target.Address
	}
	if len(decisions) != len(peers) {
		t.Fatalf("%d decisions for %d peers", len(decisions), len(peers))
	}
	var allowed []vpnv1.VPNPeer
	for _, p := range peers {
		d, ok := decisions[p.Name]
		if !ok {
			t.Fatalf("no decision for %s", p.Name)
		}
		if d.Message == "" {
			t.Errorf("%s: empty message", p.Name)
		}
		matches := (p.Spec.IPsec != nil) != (p.Spec.WireGuard != nil) &&
			((gw.Spec.Protocol == vpnv1.ProtocolIPsec) == (p.Spec.IPsec != nil))
		if !matches {
			if d.Reason != ReasonProtocolMismatch || d.Authorized {
				t.Errorf("%s: protocol mismatch decided %+v", p.Name, d)
			}
			continue
		}
		if d.Authorized != (d.Reason == ReasonDefaultAllow || d.Reason == ReasonAuthorized) {
			t.Errorf("%s: Authorized=%v with reason %s", p.Name, d.Authorized, d.Reason)
		}
		if !d.Authorized {
			continue
		}
		allowed = append(allowed, p)
		a := p.Spec.Authorization
		var grantedRev []string
		switch d.Reason {
		case ReasonDefaultAllow:
			if len(peers) != 1 || a != nil {
				t.Errorf("%s: DefaultAllow with %d peers, block %v", p.Name, len(peers), a)
			}
			grantedRev = revs
		case ReasonAuthorized:
			if a == nil || len(a.Exposures)+len(a.ReverseExposures) == 0 {
				t.Fatalf("%s: Authorized without grants", p.Name)
			}
			for _, n := range a.Exposures {
				if !slices.Contains(exps, n) {
					t.Errorf("%s: authorized with unknown exposure %s", p.Name, n)
				}
			}
			for _, n := range a.ReverseExposures {
				if !slices.Contains(revs, n) {
					t.Errorf("%s: authorized with unknown reverse exposure %s", p.Name, n)
				}
			}
			grantedRev = a.ReverseExposures
		}
		for _, r := range grantedRev {
			if !addrInPrefixes(targets[r], parsedSubnets(peerSubnets(gw, &p))) {
				t.Errorf("%s: authorized with reverse exposure %s (%s) outside its subnets", p.Name, r, targets[r])
			}
		}
		// No older peer (of any kind) overlaps an authorized peer.
		for _, q := range peers {
			if q.Name == p.Name || compareAge(&q, &p) > 0 {
				continue
			}
			if anyOverlap(parsedSubnets(peerSubnets(gw, &p)), parsedSubnets(peerSubnets(gw, &q))) {
				t.Errorf("%s: authorized although older peer %s overlaps it", p.Name, q.Name)
			}
		}
	}
	for i := range allowed {
		for j := range i {
			a, b := parsedSubnets(peerSubnets(gw, &allowed[i])), parsedSubnets(peerSubnets(gw, &allowed[j]))
			if anyOverlap(a, b) {
				t.Errorf("authorized peers %s and %s overlap", allowed[i].Name, allowed[j].Name)
			}
		}
	}
}

// anyOverlap is the plain pairwise check, the oracle of the model's sweep.
func anyOverlap(a, b []netip.Prefix) bool {
	for _, x := range a {
		for _, y := range b {
			if x.Overlaps(y) {
				return true
			}
		}
	}
	return false
}
