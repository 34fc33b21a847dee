package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/kube"
	"github.com/bnerd/bnerd-vpn-operator/internal/legacy"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// +kubebuilder:rbac:groups=ipsec.bnerd.net,resources=ipsecgateways,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=ipsec.bnerd.net,resources=ipsecgateways/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ipsec.bnerd.net,resources=ipsecgateways/finalizers,verbs=update

// Condition reason of a released (migrated) IPsecGateway.
const ReasonMigrated = "Migrated"

// Released reports whether a legacy gateway was handed over to a VPNGateway
// (ipsecv1.AnnotationMigratedTo): the operator leaves it alone.
func Released(g *ipsecv1.IPsecGateway) bool {
	_, ok := g.Annotations[ipsecv1.AnnotationMigratedTo]
	return ok
}

// IPsecGatewayReconciler serves the legacy ipsec.bnerd.net IPsecGateway: it translates the
// object into the unified gateway and peers (internal/legacy) and runs the VPNGateway
// reconciler's phases on them — one validator, renderer and agent for both kinds; only the
// translation and the status writer are its own. Children are owned by the IPsecGateway,
// named so that they never collide with a VPNGateway's, and its service CIDR is allocated
// under a key of its own kind.
type IPsecGatewayReconciler struct {
	// Gateways is the VPNGateway reconciler, set up first: its phases, allocator and endpoint
	// providers serve the legacy gateways too.
	Gateways *GatewayReconciler
}

// SetupWithManager registers the reconciler and its watches.
func (r *IPsecGatewayReconciler) SetupWithManager(mgr ctrl.Manager, concurrency int) error {
	g := r.Gateways
	if g == nil || g.alloc == nil {
		return fmt.Errorf("the IPsecGateway reconciler needs the VPNGateway reconciler set up first")
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&ipsecv1.IPsecGateway{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Owns(&corev1.Service{}).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(r.legacyNamingService(false))).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(r.legacyOfEndpointSlice)).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.legacyOfSecret)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.legacyOfNamespace),
			builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.legacyWithReverse), builder.WithPredicates(podAddressesChanged)).
		WatchesRawSource(source.Channel(g.alloc.wakeLegacy, &handler.EnqueueRequestForObject{})).
		WatchesRawSource(source.Channel(g.rollouts.wakeLegacy, &handler.EnqueueRequestForObject{})).
		// A host-network gateway of either kind coming, going or being released changes who
		// holds the node's tunnel ports.
		Watches(&vpnv1.VPNGateway{}, handler.EnqueueRequestsFromMapFunc(r.legacyOnSameNode)).
		Watches(&ipsecv1.IPsecGateway{}, handler.EnqueueRequestsFromMapFunc(r.legacyOnSameNode)).
		Watches(&ipsecv1.ClusterLink{}, handler.EnqueueRequestsFromMapFunc(r.allLegacy), builder.WithPredicates(linkReadinessChanged)).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency}).
		Named("ipsecgateway").
		Complete(r)
}

// Reconcile: get → released? → finalizer → translate → the VPNGateway phases → the
// IPsecGateway's status.
func (r *IPsecGatewayReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	g := &ipsecv1.IPsecGateway{}
	if err := r.Gateways.Client.Get(ctx, req.NamespacedName, g); err != nil {
		if apierrors.IsNotFound(err) {
			r.Gateways.alloc.release(model.KindIPsecGateway, req.Namespace, req.Name)
			forgetLegacyGateway(req.Namespace, req.Name)
			r.Gateways.rollouts.forget(types.NamespacedName{Namespace: req.Namespace, Name: children.NameFor(model.KindIPsecGateway, req.Name)})
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if err := r.Gateways.alloc.ensureSeeded(ctx, r.Gateways.Client); err != nil {
		return ctrl.Result{}, err
	}
	if Released(g) {
		return ctrl.Result{}, r.release(ctx, g)
	}
	if !g.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.finalize(ctx, g)
	}
	if !controllerutil.ContainsFinalizer(g, FinalizerAddresses) {
		patch := client.MergeFrom(g.DeepCopy())
		controllerutil.AddFinalizer(g, FinalizerAddresses)
		if err := r.Gateways.Client.Patch(ctx, g, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
	}
	return r.Gateways.reconcilePhases(ctx, legacyScope(g))
}

// legacyScope is the scope of one pass over a legacy gateway: the translated gateway and
// peers, with the IPsecGateway's conditions (their transition times are kept).
func legacyScope(g *ipsecv1.IPsecGateway) *gatewayScope {
	gw, peers := legacy.Translate(g)
	gw.Status.Conditions = slices.Clone(g.Status.Conditions)
	return &gatewayScope{gw: gw, peers: peers, kind: model.KindIPsecGateway, obj: g, legacy: g}
}

// finalize releases what the gateway holds, as for a VPNGateway: the public endpoint (a pinned
// floating IP only disassociated), then its service CIDR, then the finalizer.
func (r *IPsecGatewayReconciler) finalize(ctx context.Context, g *ipsecv1.IPsecGateway) error {
	if !controllerutil.ContainsFinalizer(g, FinalizerAddresses) {
		return nil
	}
	gw, peers := legacy.Translate(g)
	if err := r.Gateways.Endpoints.DeleteAll(ctx, endpointRequest(model.KindIPsecGateway, gw, peers)); err != nil {
		return fmt.Errorf("deleting the public endpoint: %w", err)
	}
	r.Gateways.alloc.release(model.KindIPsecGateway, g.Namespace, g.Name)
	forgetLegacyGateway(g.Namespace, g.Name)
	r.Gateways.rollouts.forget(types.NamespacedName{Namespace: g.Namespace, Name: children.NameFor(model.KindIPsecGateway, g.Name)})
	patch := client.MergeFrom(g.DeepCopy())
	controllerutil.RemoveFinalizer(g, FinalizerAddresses)
	if err := r.Gateways.Client.Patch(ctx, g, patch); err != nil {
		return fmt.Errorf("removing finalizer: %w", err)
	}
	r.Gateways.Recorder.Eventf(g, nil, corev1.EventTypeNormal, "AddressesReleased", "Delete", "released service CIDR %s", g.Status.ServiceCIDR)
	return nil
}

// release hands a migrated gateway over (ipsecv1.AnnotationMigratedTo): its pod and the other
// children rendered for it go, so the new gateway can take the node's tunnel ports and the
// reverse-exposure Services' names; its service CIDR leaves the pool's books (the new
// gateway claims the same one); its public endpoint is never released — a floating IP is
// handed over (its port and security group deleted, the address disassociated and untagged for
// the new gateway, pinned to it, to adopt), a LoadBalancer Service or host address stays; and
// its finalizer goes, so deleting it releases nothing.
func (r *IPsecGatewayReconciler) release(ctx context.Context, g *ipsecv1.IPsecGateway) error {
	if err := r.deleteChildren(ctx, g); err != nil {
		return err
	}
	if controllerutil.ContainsFinalizer(g, FinalizerAddresses) {
		// A floating IP goes to the new gateway (pinned to it): this gateway's port and
		// security group go, the address is disassociated and untagged, never released. First:
		// releasing the service CIDR below wakes the new gateway, which then finds the address
		// free.
		gw, _ := legacy.Translate(g)
		if err := r.Gateways.Endpoints.HandOver(ctx, endpointRequest(model.KindIPsecGateway, gw, nil)); err != nil {
			return fmt.Errorf("handing the floating IP over: %w", err)
		}
	}
	r.Gateways.alloc.release(model.KindIPsecGateway, g.Namespace, g.Name)
	forgetLegacyGateway(g.Namespace, g.Name) // not serving, and not meant to: no alert
	r.Gateways.rollouts.forget(types.NamespacedName{Namespace: g.Namespace, Name: children.NameFor(model.KindIPsecGateway, g.Name)})
	if controllerutil.ContainsFinalizer(g, FinalizerAddresses) {
		patch := client.MergeFrom(g.DeepCopy())
		controllerutil.RemoveFinalizer(g, FinalizerAddresses)
		if err := r.Gateways.Client.Patch(ctx, g, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("removing finalizer: %w", err)
		}
	}
	if !g.DeletionTimestamp.IsZero() {
		return nil
	}
	to := g.Annotations[ipsecv1.AnnotationMigratedTo]
	msg := fmt.Sprintf("migrated to VPNGateway %q: this gateway is no longer reconciled, its pod is removed and its public endpoint is left to the new gateway", to)
	conds := slices.Clone(g.Status.Conditions)
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	meta.SetStatusCondition(&conds, metav1.Condition{Type: vpnv1.ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonMigrated,
		Message: msg, ObservedGeneration: g.Generation, LastTransitionTime: now})
	if equality.Semantic.DeepEqual(conds, g.Status.Conditions) {
		return nil
	}
	r.Gateways.Recorder.Eventf(g, nil, corev1.EventTypeNormal, ReasonMigrated, "Release", "%s", msg)
	st := operatorLegacyStatus(g.Status)
	st.Conditions = conds
	return applyLegacyStatus(ctx, r.Gateways.Client, g, &st)
}

// deleteChildren deletes what the operator rendered for the gateway (only objects it owns).
func (r *IPsecGatewayReconciler) deleteChildren(ctx context.Context, g *ipsecv1.IPsecGateway) error {
	c := r.Gateways.Client
	name := children.NameFor(model.KindIPsecGateway, g.Name)
	objs := []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: name}},
		&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: name}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: children.ConfigMapNameFor(model.KindIPsecGateway, g.Name)}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: name}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: name}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: name}},
	}
	var services corev1.ServiceList
	if err := c.List(ctx, &services, client.InNamespace(g.Namespace), client.MatchingLabels{children.LabelIPsecGateway: g.Name}); err != nil {
		return fmt.Errorf("listing the gateway's Services: %w", err)
	}
	for i := range services.Items {
		// Reverse-exposure Services only: a LoadBalancer Service is the endpoint.
		if _, reverse := services.Items[i].Labels[children.LabelReverseExposure]; reverse {
			objs = append(objs, &services.Items[i])
		}
	}
	for _, o := range objs {
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return fmt.Errorf("reading %T %s: %w", o, o.GetName(), err)
		}
		if !ownedBy(o, g.UID) || !o.GetDeletionTimestamp().IsZero() {
			continue
		}
		uid := o.GetUID()
		if err := c.Delete(ctx, o, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %T %s of a released gateway: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// writeLegacyStatus writes an IPsecGateway's status from the scope: the VPNGateway's
// conditions, service CIDR, public address and virtual IPs. Its tunnels (status.tunnels,
// tunnelsUp) are the gateway agent's: the operator's apply leaves them out, so they stay.
func (r *GatewayReconciler) writeLegacyStatus(ctx context.Context, s *gatewayScope) error {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	unified := computeGatewayStatus(s, now)
	desired := ipsecv1.IPsecGatewayStatus{
		ObservedGeneration: unified.ObservedGeneration,
		ServiceCIDR:        unified.ServiceCIDR,
		PublicAddress:      unified.PublicAddress,
		Exposures:          unified.Exposures,
		ReverseExposures:   unified.ReverseExposures,
		Conditions:         unified.Conditions,
	}
	observeLegacyGateway(s.legacy.Namespace, s.legacy.Name, desired.Conditions)
	if equality.Semantic.DeepEqual(desired, operatorLegacyStatus(s.legacy.Status)) {
		return nil
	}
	r.recordTransitions(s.legacy, s.legacy.Status.Conditions, desired.Conditions)
	return applyLegacyStatus(ctx, r.Client, s.legacy, &desired)
}

// operatorLegacyStatus is the part of an IPsecGateway's status the operator writes.
func operatorLegacyStatus(st ipsecv1.IPsecGatewayStatus) ipsecv1.IPsecGatewayStatus {
	st.Tunnels, st.TunnelsUp = nil, ""
	return st
}

func applyLegacyStatus(ctx context.Context, c client.Client, g *ipsecv1.IPsecGateway, st *ipsecv1.IPsecGatewayStatus) error {
	return kube.ApplyStatus(ctx, c, ipsecv1.GroupVersion.WithKind(model.KindIPsecGateway), g.Namespace, g.Name, FieldOwner, st)
}

// --- watches ---

func (r *IPsecGatewayReconciler) list(ctx context.Context, opts ...client.ListOption) []ipsecv1.IPsecGateway {
	var list ipsecv1.IPsecGatewayList
	if err := r.Gateways.Client.List(ctx, &list, opts...); err != nil {
		return nil
	}
	return list.Items
}

func requestsOf(gws []ipsecv1.IPsecGateway, keep func(*ipsecv1.IPsecGateway) bool) []reconcile.Request {
	var reqs []reconcile.Request
	for i := range gws {
		if keep(&gws[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&gws[i])})
		}
	}
	return reqs
}

func (r *IPsecGatewayReconciler) legacyNamingService(hostNetworkOnly bool) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		return r.namingService(ctx, o.GetNamespace(), o.GetName(), hostNetworkOnly)
	}
}

func (r *IPsecGatewayReconciler) namingService(ctx context.Context, namespace, service string, hostNetworkOnly bool) []reconcile.Request {
	return requestsOf(r.list(ctx, client.InNamespace(namespace)), func(g *ipsecv1.IPsecGateway) bool {
		if hostNetworkOnly && g.Spec.Endpoint.HostNetwork == nil {
			return false
		}
		return slices.ContainsFunc(g.Spec.Exposures, func(e vpnv1.Exposure) bool {
			return e.Target.Service != nil && e.Target.Service.Name == service
		})
	})
}

func (r *IPsecGatewayReconciler) legacyOfEndpointSlice(ctx context.Context, o client.Object) []reconcile.Request {
	svc := o.GetLabels()[discoveryv1.LabelServiceName]
	if svc == "" {
		return nil
	}
	return r.namingService(ctx, o.GetNamespace(), svc, true)
}

func (r *IPsecGatewayReconciler) legacyOfSecret(ctx context.Context, o client.Object) []reconcile.Request {
	return requestsOf(r.list(ctx, client.InNamespace(o.GetNamespace())), func(g *ipsecv1.IPsecGateway) bool {
		return slices.ContainsFunc(g.Spec.Tunnels, func(t ipsecv1.Tunnel) bool { return t.PSKSecretRef.Name == o.GetName() })
	})
}

func (r *IPsecGatewayReconciler) legacyOfNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	return requestsOf(r.list(ctx, client.InNamespace(o.GetName())), func(*ipsecv1.IPsecGateway) bool { return true })
}

func (r *IPsecGatewayReconciler) legacyWithReverse(ctx context.Context, o client.Object) []reconcile.Request {
	return requestsOf(r.list(ctx, client.InNamespace(o.GetNamespace())), func(g *ipsecv1.IPsecGateway) bool {
		return len(g.Spec.ReverseExposures) > 0
	})
}

// legacyOnSameNode: the other legacy host-network gateways on the node of a host-network
// gateway of either kind.
func (r *IPsecGatewayReconciler) legacyOnSameNode(ctx context.Context, o client.Object) []reconcile.Request {
	node := hostNetworkNode(o)
	if node == "" {
		return nil
	}
	return requestsOf(r.list(ctx, client.MatchingFields{IndexGatewayNode: node}), func(g *ipsecv1.IPsecGateway) bool {
		return g.UID != o.GetUID()
	})
}

// hostNetworkNode is the node of a host-network gateway of either kind, or "".
func hostNetworkNode(o client.Object) string {
	var hn *vpnv1.HostNetworkEndpoint
	switch g := o.(type) {
	case *vpnv1.VPNGateway:
		hn = g.Spec.Endpoint.HostNetwork
	case *ipsecv1.IPsecGateway:
		hn = g.Spec.Endpoint.HostNetwork
	}
	if hn == nil {
		return ""
	}
	return hn.NodeName
}

// vpnGatewaysOnSameNode: the VPNGateways on the node of a legacy host-network gateway that
// came, went or was released.
func (r *GatewayReconciler) vpnGatewaysOnSameNode(ctx context.Context, o client.Object) []reconcile.Request {
	node := hostNetworkNode(o)
	if node == "" {
		return nil
	}
	var list vpnv1.VPNGatewayList
	if err := r.Client.List(ctx, &list, client.MatchingFields{IndexGatewayNode: node}); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: list.Items[i].Namespace, Name: list.Items[i].Name}})
	}
	return reqs
}
