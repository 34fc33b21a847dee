package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/hostnetwork"
)

// Field indexes the reconcilers look objects up by.
const (
	// IndexPeerGateway: VPNPeer by spec.gatewayRef.
	IndexPeerGateway = "spec.gatewayRef"
	// IndexPeerSecret: VPNPeer by the names of the Secrets it references.
	IndexPeerSecret = "vpn.bnerd.net/secret-names"
	// IndexGatewayService: VPNGateway by the names of its exposure target Services.
	IndexGatewayService = "vpn.bnerd.net/target-services"
	// IndexGatewayNode: VPNGateway by its host-network node (conflict checks).
	IndexGatewayNode = "vpn.bnerd.net/host-network-node"
	// IndexGatewayReverse: VPNGateway by whom its reverse exposures admit ("own": it has
	// reverse exposures; "selector": it also names other namespaces).
	IndexGatewayReverse = "vpn.bnerd.net/reverse-clients"
)

// SetupIndexes registers the field indexes on the manager's cache.
func SetupIndexes(ctx context.Context, mgr manager.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &vpnv1.VPNPeer{}, IndexPeerGateway, func(o client.Object) []string {
		return []string{o.(*vpnv1.VPNPeer).Spec.GatewayRef}
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &vpnv1.VPNPeer{}, IndexPeerSecret, func(o client.Object) []string {
		return peerSecretNames(o.(*vpnv1.VPNPeer))
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &vpnv1.VPNGateway{}, IndexGatewayNode, func(o client.Object) []string {
		return hostnetwork.NodeName(o.(*vpnv1.VPNGateway))
	}); err != nil {
		return err
	}
	// Legacy gateways hold nodes too (the host-network conflict check lists both kinds).
	if err := idx.IndexField(ctx, &ipsecv1.IPsecGateway{}, IndexGatewayNode, func(o client.Object) []string {
		if n := hostNetworkNode(o); n != "" {
			return []string{n}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &vpnv1.VPNGateway{}, IndexGatewayReverse, func(o client.Object) []string {
		return reverseIndexValues(o.(*vpnv1.VPNGateway))
	}); err != nil {
		return err
	}
	return idx.IndexField(ctx, &vpnv1.VPNGateway{}, IndexGatewayService, func(o client.Object) []string {
		var names []string
		for _, e := range o.(*vpnv1.VPNGateway).Spec.Exposures {
			if e.Target.Service != nil {
				names = append(names, e.Target.Service.Name)
			}
		}
		return names
	})
}

// peerSecretNames are the Secrets a peer's tunnel needs.
func peerSecretNames(p *vpnv1.VPNPeer) []string {
	var names []string
	if p.Spec.IPsec != nil {
		names = append(names, p.Spec.IPsec.PSKSecretRef.Name)
	}
	if p.Spec.WireGuard != nil && p.Spec.WireGuard.PresharedKeySecretRef != nil {
		names = append(names, p.Spec.WireGuard.PresharedKeySecretRef.Name)
	}
	return names
}

// requestsForAll lists every object of the list's kind (from the cache) and returns a request
// for each: for a change that reaches all of them (a ClusterLink becoming ready or not).
func requestsForAll(ctx context.Context, c client.Reader, list client.ObjectList) []reconcile.Request {
	if err := c.List(ctx, list); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		if obj, ok := o.(client.Object); ok {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
		}
		return nil
	})
	return reqs
}
