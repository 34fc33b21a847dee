package controller

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// Reverse exposures are reached from their gateway's tenant: the pods of the gateway's own
// namespace and of the namespaces spec.reverseExposureNamespaces selects. The gateway's
// ruleset admits exactly those pods' addresses (model.Gateway.ReverseClients), so the
// operator follows Pods: it caches only what it needs of them (StripPod) and wakes a gateway
// only when one of its tenant's pods gains or loses an address.

// reverseClients are the addresses of the pods that may reach the gateway's reverse
// exposures; nil when it has none.
func (r *GatewayReconciler) reverseClients(ctx context.Context, gw *vpnv1.VPNGateway) ([]netip.Addr, error) {
	if len(gw.Spec.ReverseExposures) == 0 {
		return nil, nil
	}
	namespaces := []string{gw.Namespace}
	if sel := gw.Spec.ReverseExposureNamespaces; sel != nil {
		selector, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return nil, nil // the model reports the invalid selector
		}
		var list corev1.NamespaceList
		if err := r.Client.List(ctx, &list, client.MatchingLabelsSelector{Selector: selector}); err != nil {
			return nil, fmt.Errorf("listing namespaces: %w", err)
		}
		for _, ns := range list.Items {
			// The pods of a namespace the operator does not serve are not in its cache (nor
			// may it read them): they do not reach the reverse exposures.
			if ns.Name != gw.Namespace && ns.DeletionTimestamp.IsZero() && r.Options.Serves(ns.Name) {
				namespaces = append(namespaces, ns.Name)
			}
		}
	}
	var out []netip.Addr
	for _, ns := range namespaces {
		var pods corev1.PodList
		if err := r.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return nil, fmt.Errorf("listing pods in %s: %w", ns, err)
		}
		for i := range pods.Items {
			out = append(out, podAddresses(&pods.Items[i])...)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), nil
}

// podAddresses are the addresses a pod may reach reverse exposures from: none for a
// host-network pod (its address is the node's, shared with everything on it) or a pod that
// has finished.
func podAddresses(p *corev1.Pod) []netip.Addr {
	if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return nil
	}
	var out []netip.Addr
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// StripPod is the cache transform for Pods: the operator keeps only a pod's identity, whether
// it uses the host network, its node, its phase and its addresses — and of a gateway's pod
// also the labels naming its gateway and its role (active, with a standby), its network
// attachment (the uplink binding) and its deletion cost.
func StripPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec:   corev1.PodSpec{HostNetwork: p.Spec.HostNetwork, NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIPs: p.Status.PodIPs},
	}
	if _, _, gateway := gatewayOfPod(p); gateway {
		out.Labels = map[string]string{}
		for _, k := range []string{children.LabelInstance, children.LabelGateway, children.LabelIPsecGateway, children.LabelRole} {
			if v, ok := p.Labels[k]; ok {
				out.Labels[k] = v
			}
		}
		for _, k := range []string{cloud.NetworksAnnotation, corev1.PodDeletionCost} {
			if a, ok := p.Annotations[k]; ok {
				if out.Annotations == nil {
					out.Annotations = map[string]string{}
				}
				out.Annotations[k] = a
			}
		}
	}
	return out, nil
}

// podAddressesChanged lets through only pod events that change what a gateway admits.
var podAddressesChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, cur := e.ObjectOld.(*corev1.Pod), e.ObjectNew.(*corev1.Pod)
		return !slices.Equal(podAddresses(old), podAddresses(cur))
	},
	CreateFunc:  func(e event.CreateEvent) bool { return len(podAddresses(e.Object.(*corev1.Pod))) > 0 },
	DeleteFunc:  func(event.DeleteEvent) bool { return true },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// gatewaysOfPod are the gateways with reverse exposures whose tenant includes the pod's
// namespace.
func (r *GatewayReconciler) gatewaysOfPod(ctx context.Context, o client.Object) []reconcile.Request {
	return r.reverseGatewaysOfNamespace(ctx, o.GetNamespace(), nil)
}

// reverseGatewaysOfNamespace are the gateways with reverse exposures in the namespace, and
// those elsewhere whose spec.reverseExposureNamespaces selects it (nsLabels, read when nil).
func (r *GatewayReconciler) reverseGatewaysOfNamespace(ctx context.Context, namespace string, nsLabels map[string]string) []reconcile.Request {
	var reqs []reconcile.Request
	var own vpnv1.VPNGatewayList
	if err := r.Client.List(ctx, &own, client.InNamespace(namespace), client.MatchingFields{IndexGatewayReverse: "own"}); err == nil {
		for i := range own.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&own.Items[i])})
		}
	}
	var selecting vpnv1.VPNGatewayList
	if err := r.Client.List(ctx, &selecting, client.MatchingFields{IndexGatewayReverse: "selector"}); err != nil || len(selecting.Items) == 0 {
		return reqs
	}
	if nsLabels == nil {
		ns := &corev1.Namespace{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: namespace}, ns); err != nil {
			return reqs
		}
		nsLabels = ns.Labels
	}
	for i := range selecting.Items {
		gw := &selecting.Items[i]
		if gw.Namespace == namespace {
			continue // already listed
		}
		if sel, err := metav1.LabelSelectorAsSelector(gw.Spec.ReverseExposureNamespaces); err == nil && sel.Matches(labels.Set(nsLabels)) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(gw)})
		}
	}
	return reqs
}

// reverseIndexValues index a gateway by how its reverse exposures choose their clients: "own"
// when it has any, and "selector" as well when it names other namespaces.
func reverseIndexValues(gw *vpnv1.VPNGateway) []string {
	if len(gw.Spec.ReverseExposures) == 0 {
		return nil
	}
	if gw.Spec.ReverseExposureNamespaces != nil {
		return []string{"own", "selector"}
	}
	return []string{"own"}
}

// ReasonReverseServiceConflict: a reverse exposure's Service name is taken by an object that is
// not this gateway's Service for that exposure (another gateway's, a tenant's own); it is left
// alone and in-cluster clients cannot reach the exposure until the name is free.
const ReasonReverseServiceConflict = "ReverseServiceConflict"

// claimReverseServices keeps the rendered reverse-exposure Services the gateway may apply: those
// that do not exist yet or are already its own for the same exposure. The others are left out
// (never taken over) and reported.
func (r *GatewayReconciler) claimReverseServices(ctx context.Context, s *gatewayScope, rendered []*corev1ac.ServiceApplyConfiguration) ([]*corev1ac.ServiceApplyConfiguration, error) {
	var keep []*corev1ac.ServiceApplyConfiguration
	s.reverseServices = map[string]string{}
	for _, svc := range rendered {
		exposure := svc.Labels[children.LabelReverseExposure]
		existing := &corev1.Service{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.gw.Namespace, Name: *svc.Name}, existing)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("reading Service %s: %w", *svc.Name, err)
		case !ownedBy(existing, s.gw.UID) || existing.Labels[children.LabelReverseExposure] != exposure:
			s.reverseProblems = append(s.reverseProblems, model.Problem{
				Reason: ReasonReverseServiceConflict,
				Message: fmt.Sprintf("reverse exposure %q: Service %s already exists and is not this gateway's; in-cluster clients cannot reach the exposure until it is renamed or the Service removed",
					exposure, *svc.Name),
			})
			continue
		}
		keep = append(keep, svc)
		s.reverseServices[exposure] = *svc.Name
	}
	return keep, nil
}

// pruneReverseServices deletes the gateway's reverse-exposure Services that it no longer renders
// (an exposure removed or renamed).
func (r *GatewayReconciler) pruneReverseServices(ctx context.Context, s *gatewayScope) error {
	var list corev1.ServiceList
	if err := r.Client.List(ctx, &list, client.InNamespace(s.gw.Namespace), client.MatchingLabels{children.GatewayLabelFor(s.kind): s.gw.Name}); err != nil {
		return fmt.Errorf("listing reverse-exposure Services: %w", err)
	}
	for i := range list.Items {
		svc := &list.Items[i]
		exposure, isReverse := svc.Labels[children.LabelReverseExposure]
		if !isReverse || !ownedBy(svc, s.gw.UID) || s.reverseServices[exposure] == svc.Name {
			continue
		}
		if err := r.Client.Delete(ctx, svc); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting Service %s of a removed reverse exposure: %w", svc.Name, err)
		}
	}
	return nil
}

// ownedBy: o's controller is the object with the given UID.
func ownedBy(o metav1.Object, uid types.UID) bool {
	ref := metav1.GetControllerOf(o)
	return ref != nil && ref.UID == uid
}

// reverseServiceIPs are the ClusterIPs of the gateway's own reverse-exposure Services, by
// exposure name (a host-network gateway translates them itself for clients on its node).
func (r *GatewayReconciler) reverseServiceIPs(ctx context.Context, gw *vpnv1.VPNGateway) (map[string]netip.Addr, error) {
	var out map[string]netip.Addr
	for _, x := range gw.Spec.ReverseExposures {
		svc := &corev1.Service{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: gw.Namespace, Name: children.ReverseServiceName(gw.Name, x.Name)}, svc)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("reading the Service of reverse exposure %s: %w", x.Name, err)
		}
		a, err := netip.ParseAddr(svc.Spec.ClusterIP)
		if err != nil || !ownedBy(svc, gw.UID) || svc.Labels[children.LabelReverseExposure] != x.Name {
			continue
		}
		if out == nil {
			out = map[string]netip.Addr{}
		}
		out[x.Name] = a
	}
	return out, nil
}
