// Package legacy translates the frozen ipsec.bnerd.net API into the unified one, so an
// IPsecGateway goes through the same model, validator, renderers and agent as a VPNGateway
// (docs/design.md "API"). Pure: no I/O.
package legacy

import (
	"net/netip"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// Translate is the VPNGateway and the VPNPeers (one per tunnel, in tunnel order, which is
// their age order) that express the IPsecGateway in the unified API:
//   - a single tunnel gets no authorization block: it reaches everything (DefaultAllow), as
//     the legacy CR's only tunnel did;
//   - with several tunnels, each gets a block granting every exposure (the legacy CR had no
//     per-tunnel scope) and the reverse exposures whose target lies in its own subnets (the
//     legacy rule: a reverse exposure goes to the tunnel whose subnets contain its target).
//
// The objects keep the IPsecGateway's namespace, name, UID, generation and status (service
// CIDR, public address, virtual IPs), so the model built from them is the legacy gateway's.
func Translate(g *ipsecv1.IPsecGateway) (*vpnv1.VPNGateway, []vpnv1.VPNPeer) {
	gw := &vpnv1.VPNGateway{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: g.Namespace, Name: g.Name, UID: g.UID, Generation: g.Generation,
			CreationTimestamp: g.CreationTimestamp,
		},
		Spec: vpnv1.VPNGatewaySpec{
			Protocol:         vpnv1.ProtocolIPsec,
			Mode:             g.Spec.Mode,
			Endpoint:         *g.Spec.Endpoint.DeepCopy(),
			ServiceCIDR:      g.Spec.ServiceCIDR,
			Exposures:        cloneSlice(g.Spec.Exposures, func(e vpnv1.Exposure) vpnv1.Exposure { return *e.DeepCopy() }),
			ReverseExposures: cloneSlice(g.Spec.ReverseExposures, func(r vpnv1.ReverseExposure) vpnv1.ReverseExposure { return *r.DeepCopy() }),
			IPsec:            &vpnv1.IPsecGatewaySettings{IKE: *g.Spec.IKE.DeepCopy()},
		},
		Status: vpnv1.VPNGatewayStatus{
			ObservedGeneration: g.Status.ObservedGeneration,
			ServiceCIDR:        g.Status.ServiceCIDR,
			PublicAddress:      g.Status.PublicAddress,
			Exposures:          slices.Clone(g.Status.Exposures),
			ReverseExposures:   slices.Clone(g.Status.ReverseExposures),
		},
	}
	var exposures []string
	for _, e := range g.Spec.Exposures {
		exposures = append(exposures, e.Name)
	}
	peers := make([]vpnv1.VPNPeer, 0, len(g.Spec.Tunnels))
	for i, t := range g.Spec.Tunnels {
		p := vpnv1.VPNPeer{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: g.Namespace, Name: t.Name,
				UID:        types.UID(string(g.UID) + "/" + t.Name),
				Generation: g.Generation,
				// Tunnel order is age order: the first tunnel is the oldest.
				CreationTimestamp: metav1.NewTime(g.CreationTimestamp.Add(time.Duration(i) * time.Nanosecond)),
			},
			Spec: vpnv1.VPNPeerSpec{
				GatewayRef: g.Name,
				IPsec: &vpnv1.IPsecPeer{
					Peer:          t.Peer,
					RemoteSubnets: slices.Clone(t.RemoteSubnets),
					ESP:           *t.ESP.DeepCopy(),
					PSKSecretRef:  t.PSKSecretRef,
				},
			},
		}
		if len(g.Spec.Tunnels) > 1 {
			p.Spec.Authorization = &vpnv1.Authorization{
				Exposures:        slices.Clone(exposures),
				ReverseExposures: reverseInside(g.Spec.ReverseExposures, t.RemoteSubnets),
			}
		}
		peers = append(peers, p)
	}
	return gw, peers
}

// reverseInside names the reverse exposures whose target lies in one of the subnets.
func reverseInside(rs []vpnv1.ReverseExposure, subnets []string) []string {
	var out []string
	for _, r := range rs {
		a, err := netip.ParseAddr(r.Target.Address)
		if err != nil {
			continue
		}
		for _, s := range subnets {
			if p, err := netip.ParsePrefix(s); err == nil && p.Contains(a) {
				out = append(out, r.Name)
				break
			}
		}
	}
	return out
}

func cloneSlice[T any](in []T, clone func(T) T) []T {
	if in == nil {
		return nil
	}
	out := make([]T, len(in))
	for i, v := range in {
		out[i] = clone(v)
	}
	return out
}
