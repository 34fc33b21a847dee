package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// clusterLink creates a ClusterLink (cluster-scoped: named after the test's namespace) and
// deletes it, waiting until it is gone, when the test ends.
func clusterLink(t *testing.T, ns, suffix, via string, cidrs ...string) *ipsecv1.ClusterLink {
	t.Helper()
	l := &ipsecv1.ClusterLink{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + suffix},
		Spec:       ipsecv1.ClusterLinkSpec{CIDRs: cidrs, Via: via, Description: "service cluster " + suffix},
	}
	if err := env.Client.Create(context.Background(), l); err != nil {
		t.Fatalf("creating ClusterLink %s: %v", l.Name, err)
	}
	t.Cleanup(func() { deleteLink(t, l) })
	return l
}

func deleteLink(t *testing.T, l *ipsecv1.ClusterLink) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Delete(ctx, l); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting ClusterLink %s: %v", l.Name, err)
	}
	eventually(t, 20*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(l), &ipsecv1.ClusterLink{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("ClusterLink %s still there (%v)", l.Name, err)
		}
		return nil
	})
}

// A ClusterLink is ready unless it overlaps a peer's subnets or a gateway's service CIDR
// (refused, naming both); a ready link's ranges become every gateway's routes (next hop via)
// and internal sources, admitted by the NetworkPolicy; its status lists the gateways using it;
// a peer arriving later that overlaps it is withheld those subnets; deleting it removes it all.
func TestClusterLink(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ctx := context.Background()
	ns := namespace(t)
	gw := ipsecGateway(ns, "gw")
	create(t, gw, pskSecret(ns, "hq"), gen.VPNPeer(ns, "hq", gen.RemoteSubnets("10.20.0.0/16")))
	eventually(t, 20*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(gw), gw); err != nil {
			return err
		}
		if gw.Status.ServiceCIDR == "" {
			return fmt.Errorf("no service CIDR yet")
		}
		return nil
	})

	link := clusterLink(t, ns, "svc", "198.51.100.202", "203.0.113.224/27")
	waitMessage(t, link, vpnv1.ConditionReady, metav1.ConditionTrue, "Ready",
		"gateways route 203.0.113.224/27 via 198.51.100.202 and admit it as an internal source")
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(link), link); err != nil {
		t.Fatal(err)
	}
	if c := link.Status.Conditions[0]; c.ObservedGeneration != link.Generation || link.Status.ObservedGeneration != link.Generation {
		t.Errorf("observed generation %d/%d, want %d", c.ObservedGeneration, link.Status.ObservedGeneration, link.Generation)
	}
	if !slices.Contains(link.Status.Gateways, ns+"/gw") {
		t.Errorf("status.gateways %v lacks %s/gw", link.Status.Gateways, ns)
	}
	linkRange := netip.MustParsePrefix("203.0.113.224/27")

	t.Run("the gateway routes to the link's range and admits it as an internal source", func(t *testing.T) {
		eventually(t, 20*time.Second, func() error {
			m, err := renderedModel(ctx, ns, "gw")
			if err != nil {
				return err
			}
			if len(m.Routes) != 1 || m.Routes[0].CIDR != linkRange || m.Routes[0].Via.String() != "198.51.100.202" || m.Routes[0].Link != link.Name {
				return fmt.Errorf("routes %+v", m.Routes)
			}
			if !slices.Contains(m.InternalSourceCIDRs, linkRange) || !slices.Contains(m.InternalSourceCIDRs, netip.MustParsePrefix("10.244.0.0/16")) {
				return fmt.Errorf("internal sources %v", m.InternalSourceCIDRs)
			}
			return nil
		})
		// The NetworkPolicy is applied after the ConfigMap.
		eventually(t, 20*time.Second, func() error {
			np := &networkingv1.NetworkPolicy{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.Name(gw.Name)}, np); err != nil {
				return err
			}
			if !policyAdmits(np, "203.0.113.224/27") {
				return fmt.Errorf("NetworkPolicy does not admit the link's range: %+v", np.Spec.Ingress)
			}
			return nil
		})
	})

	t.Run("a link overlapping an older peer's subnets is refused, naming both", func(t *testing.T) {
		bad := clusterLink(t, ns, "peer", "198.51.100.206", "10.20.0.0/24")
		waitMessage(t, bad, vpnv1.ConditionReady, metav1.ConditionFalse, "OverlapsPeerSubnet",
			fmt.Sprintf("cidr 10.20.0.0/24 overlaps peer %s/hq subnet 10.20.0.0/16", ns))
	})

	t.Run("a link overlapping a gateway's service CIDR is refused, naming both", func(t *testing.T) {
		bad := clusterLink(t, ns, "svccidr", "198.51.100.206", gw.Status.ServiceCIDR)
		waitMessage(t, bad, vpnv1.ConditionReady, metav1.ConditionFalse, "OverlapsServiceCIDR",
			fmt.Sprintf("cidr %s overlaps gateway %s/gw service CIDR %s", gw.Status.ServiceCIDR, ns, gw.Status.ServiceCIDR))
	})

	t.Run("a younger peer overlapping the ready link is withheld those subnets; the link stays", func(t *testing.T) {
		// Creation times have a resolution of one second: the peer must be visibly younger.
		eventually(t, 5*time.Second, func() error {
			if !time.Now().After(link.CreationTimestamp.Add(time.Second)) {
				return fmt.Errorf("still within the link's creation second")
			}
			return nil
		})
		create(t, pskSecret(ns, "late"), gen.VPNPeer(ns, "late", gen.RemoteSubnets("203.0.113.240/28", "10.30.0.0/16")))
		eventually(t, 20*time.Second, func() error {
			m, err := renderedModel(ctx, ns, "gw")
			if err != nil {
				return err
			}
			for _, p := range m.Peers {
				if p.Name == "late" {
					if !slices.Equal(p.WithheldCIDRs, []netip.Prefix{netip.MustParsePrefix("203.0.113.240/28")}) {
						return fmt.Errorf("late withholds %v, carries %v", p.WithheldCIDRs, p.SourceCIDRs)
					}
					return nil
				}
			}
			return fmt.Errorf("peer late not rendered yet")
		})
		late := &vpnv1.VPNPeer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "late"}}
		c := waitCondition(t, late, vpnv1.ConditionAuthorized, metav1.ConditionFalse, "SubnetOverlapsClusterRange")
		if want := "203.0.113.240/28 overlaps ClusterLink " + link.Name + " 203.0.113.224/27"; !strings.Contains(c.Message, want) {
			t.Errorf("late's Authorized message %q does not say %q", c.Message, want)
		}
		waitCondition(t, link, vpnv1.ConditionReady, metav1.ConditionTrue, "Ready")
	})

	t.Run("deleting the link removes its routes and internal sources", func(t *testing.T) {
		deleteLink(t, link)
		eventually(t, 20*time.Second, func() error {
			m, err := renderedModel(ctx, ns, "gw")
			if err != nil {
				return err
			}
			if len(m.Routes) != 0 || slices.Contains(m.InternalSourceCIDRs, linkRange) {
				return fmt.Errorf("routes %+v internal sources %v", m.Routes, m.InternalSourceCIDRs)
			}
			return nil
		})
	})
}

// policyAdmits reports whether an ingress rule of the policy admits the CIDR as an ipBlock.
func policyAdmits(np *networkingv1.NetworkPolicy, cidr string) bool {
	for _, r := range np.Spec.Ingress {
		for _, f := range r.From {
			if f.IPBlock != nil && f.IPBlock.CIDR == cidr {
				return true
			}
		}
	}
	return false
}
