package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/hostnetwork"
	"github.com/bnerd/bnerd-vpn-operator/internal/ipam"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// +kubebuilder:rbac:groups=vpn.bnerd.net,resources=vpngateways,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=vpn.bnerd.net,resources=vpngateways/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=vpn.bnerd.net,resources=vpngateways/finalizers,verbs=update
// +kubebuilder:rbac:groups=vpn.bnerd.net,resources=vpnpeers,verbs=get;list;watch
// +kubebuilder:rbac:groups=vpn.bnerd.net,resources=vpnpeers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps;serviceaccounts;services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=nodes;namespaces;pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=k8s.cni.cncf.io,resources=network-attachment-definitions,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// GatewayReconciler turns a VPNGateway and its peers into the gateway's children and status.
type GatewayReconciler struct {
	Client client.Client
	// APIReader reads Secrets directly (the cache holds none), and a child the cache shows
	// edited, to confirm it before restoring it.
	APIReader client.Reader
	// Secrets tells the peers' Secrets' types (shared with the PeerReconciler).
	Secrets  *SecretFacts
	Recorder events.EventRecorder
	Options  Options
	// Endpoints provisions public endpoints (OpenStack, LoadBalancer, host network).
	Endpoints *cloud.Chooser
	alloc     *allocator
	// written: what the last pass wrote to each VPNGateway, for passes that start before the
	// cache shows it.
	written written[*vpnv1.VPNGateway]
	// poolRetry is how long a gateway waits before retrying an exhausted pool.
	poolRetry time.Duration
	// rollouts bounds how many gateways move to new gateway images at a time.
	rollouts *rolloutGate
}

// SetupWithManager registers the reconciler and its watches.
func (r *GatewayReconciler) SetupWithManager(mgr ctrl.Manager, concurrency int) error {
	a, err := newAllocator(r.Options.Model.PoolCIDR, r.Options.Limits)
	if err != nil {
		return err
	}
	r.alloc = a
	r.rollouts = newRolloutGate(r.Options.RolloutConcurrency)
	if r.poolRetry == 0 {
		r.poolRetry = 10 * time.Minute // a safety net: releases wake waiting gateways at once
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&vpnv1.VPNGateway{}, builder.WithPredicates(notStatusOnly)).
		// Children matter when they change or go; their creation is the pass that created them
		// (and that pass took them into account).
		Owns(&appsv1.Deployment{}, notCreated).
		Owns(&corev1.ConfigMap{}, notCreated).
		Owns(&corev1.ServiceAccount{}, notCreated).
		Owns(&rbacv1.Role{}, notCreated).
		Owns(&rbacv1.RoleBinding{}, notCreated).
		Owns(&networkingv1.NetworkPolicy{}, notCreated).
		Owns(&policyv1.PodDisruptionBudget{}, notCreated).
		// A gateway with a standby: its Lease names the active pod and the last takeover
		// (status.availability); its pods come, go and change role.
		Owns(&coordinationv1.Lease{}, builder.WithPredicates(leaseEvents)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(vpnGatewayOfPod), builder.WithPredicates(gatewayPodChanged)).
		// Services: the LoadBalancer endpoint's address arriving; a reverse exposure's Service
		// is given its ClusterIP at creation, which the model needs (so creation counts).
		Owns(&corev1.Service{}).
		// Peers matter to the gateway through their spec (and existence), not their status.
		Watches(&vpnv1.VPNPeer{}, handler.EnqueueRequestsFromMapFunc(gatewayOfPeer), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(r.gatewaysOfService)).
		// The admin labelling a namespace allows (or stops) its host-network gateways.
		// and changes which namespaces' pods reach reverse exposures.
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.gatewaysOfNamespace),
			builder.WithPredicates(predicate.LabelChangedPredicate{})).
		// A tenant's pod gaining or losing an address changes who reaches reverse exposures.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.gatewaysOfPod), builder.WithPredicates(podAddressesChanged)).
		// A peer's Secret appearing (or being replaced by one of another type) changes whether
		// the gateway may read it.
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.gatewaysOfSecret)).
		// Host-network gateways send a Service's traffic to one of its endpoints.
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(r.hostNetworkGatewaysOfEndpointSlice)).
		WatchesRawSource(source.Channel(a.wake, &handler.EnqueueRequestForObject{})).
		// A gateway that finished rolling wakes those waiting to move to new images.
		WatchesRawSource(source.Channel(r.rollouts.wake, &handler.EnqueueRequestForObject{})).
		// A host-network gateway that comes or goes changes who holds the node's tunnel ports.
		Watches(&vpnv1.VPNGateway{}, handler.EnqueueRequestsFromMapFunc(r.sameNode), builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(event.UpdateEvent) bool { return false },
		})).
		// A legacy host-network gateway that comes, goes or is released (migrated) too.
		Watches(&ipsecv1.IPsecGateway{}, handler.EnqueueRequestsFromMapFunc(r.vpnGatewaysOnSameNode)).
		// A ClusterLink becoming ready (or not) changes every gateway's routes and internal sources.
		Watches(&ipsecv1.ClusterLink{}, handler.EnqueueRequestsFromMapFunc(r.allGateways), builder.WithPredicates(linkReadinessChanged)).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency}).
		Named("vpngateway").
		Complete(r)
}

// notCreated drops create events: for a gateway's children, only the gateway's own pass
// creates them (with its controller reference), and that pass already accounted for them.
// A restarted operator passes over every gateway anyway (For).
var notCreated = builder.WithPredicates(predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false }})

func gatewayOfPeer(_ context.Context, o client.Object) []reconcile.Request {
	p := o.(*vpnv1.VPNPeer)
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Spec.GatewayRef}}}
}

func (r *GatewayReconciler) sameNode(ctx context.Context, o client.Object) []reconcile.Request {
	nodes := hostnetwork.NodeName(o.(*vpnv1.VPNGateway))
	if len(nodes) == 0 {
		return nil
	}
	var list vpnv1.VPNGatewayList
	if err := r.Client.List(ctx, &list, client.MatchingFields{IndexGatewayNode: nodes[0]}); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].UID != o.GetUID() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}

func (r *GatewayReconciler) gatewaysOfNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	reqs := r.hostNetworkGatewaysOfNamespace(ctx, o)
	for _, req := range r.reverseGatewaysOfNamespace(ctx, o.GetName(), o.GetLabels()) {
		if !slices.Contains(reqs, req) {
			reqs = append(reqs, req)
		}
	}
	return reqs
}

func (r *GatewayReconciler) hostNetworkGatewaysOfNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	var list vpnv1.VPNGatewayList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetName())); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, gw := range list.Items {
		if gw.Spec.Endpoint.HostNetwork != nil {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&gw)})
		}
	}
	return reqs
}

func (r *GatewayReconciler) gatewaysOfSecret(ctx context.Context, o client.Object) []reconcile.Request {
	// The WireGuard key the operator generated for a gateway (owned by it) appearing.
	if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "VPNGateway" && ref.APIVersion == vpnv1.GroupVersion.String() {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}}}
	}
	var list vpnv1.VPNPeerList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{IndexPeerSecret: o.GetName()}); err != nil {
		return nil
	}
	seen := map[string]bool{}
	var reqs []reconcile.Request
	for _, p := range list.Items {
		if !seen[p.Spec.GatewayRef] {
			seen[p.Spec.GatewayRef] = true
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Spec.GatewayRef}})
		}
	}
	return reqs
}

func (r *GatewayReconciler) gatewaysOfService(ctx context.Context, o client.Object) []reconcile.Request {
	return r.gatewaysNamingService(ctx, o.GetNamespace(), o.GetName(), false)
}

func (r *GatewayReconciler) hostNetworkGatewaysOfEndpointSlice(ctx context.Context, o client.Object) []reconcile.Request {
	svc := o.GetLabels()[discoveryv1.LabelServiceName]
	if svc == "" {
		return nil
	}
	return r.gatewaysNamingService(ctx, o.GetNamespace(), svc, true)
}

// gatewaysNamingService are the gateways with an exposure of the Service (only host-network
// ones, when hostNetworkOnly).
func (r *GatewayReconciler) gatewaysNamingService(ctx context.Context, namespace, service string, hostNetworkOnly bool) []reconcile.Request {
	var list vpnv1.VPNGatewayList
	if err := r.Client.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{IndexGatewayService: service}); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, gw := range list.Items {
		if hostNetworkOnly && gw.Spec.Endpoint.HostNetwork == nil {
			continue
		}
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&gw)})
	}
	return reqs
}

// Reconcile: get → finalizer → phases into a scope → status computed in one place → one write.
func (r *GatewayReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	gw := &vpnv1.VPNGateway{}
	if err := r.Client.Get(ctx, req.NamespacedName, gw); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone without our finalizer having run (e.g. finalizer removed by hand).
			r.alloc.release("", req.Namespace, req.Name)
			forgetGateway(req.Namespace, req.Name)
			r.written.forget(req.NamespacedName)
			r.rollouts.forget(types.NamespacedName{Namespace: req.Namespace, Name: children.NameFor("", req.Name)})
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	gw, stale := r.written.recall(gw)
	if err := r.alloc.ensureSeeded(ctx, r.Client); err != nil {
		return ctrl.Result{}, err
	}

	if !gw.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.finalize(ctx, gw)
	}
	if !controllerutil.ContainsFinalizer(gw, FinalizerAddresses) {
		patch := client.MergeFrom(gw.DeepCopy())
		controllerutil.AddFinalizer(gw, FinalizerAddresses)
		if err := r.Client.Patch(ctx, gw, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
		stale = append(stale, gw.ResourceVersion)
	}

	s := &gatewayScope{gw: gw, obj: gw, stale: stale}
	if err := r.loadPeers(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	return r.reconcilePhases(ctx, s)
}

// reconcilePhases runs the phases of one reconcile pass on a gateway and its peers — a
// VPNGateway's, or those a legacy IPsecGateway translates to (s.kind) — and writes the
// status of the object that declared them: one path for both kinds.
func (r *GatewayReconciler) reconcilePhases(ctx context.Context, s *gatewayScope) (ctrl.Result, error) {
	var result ctrl.Result
	var errs []error
	permitted, err := r.hostNetworkPermitted(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Address space is claimed only by a gateway allowed to run (one that holds a service CIDR
	// already keeps it: its clients use it).
	if permitted || s.gw.Status.ServiceCIDR != "" {
		r.allocateServiceCIDR(s, &result)
	} else {
		s.addresses = failed(ReasonNotPermitted, "no service CIDR is claimed for a gateway that may not run (see EndpointReady)")
	}
	if permitted {
		retry, err := r.ensureEndpoint(ctx, s)
		if err != nil {
			errs = append(errs, err)
		}
		result.RequeueAfter = minPositive(result.RequeueAfter, retry)
		// An endpoint someone else holds gets no children at all: a node's tunnel ports held by
		// another host-network gateway, or a pinned floating IP still on another port (the
		// client's VM in a cutover: a gateway pod would initiate toward the client from the
		// cluster's egress address and could pull the tunnel off the VM).
		s.blocked = s.endpoint.outcome.reason == cloud.ReasonConflict &&
			(s.gw.Spec.Endpoint.HostNetwork != nil || s.gw.Spec.Endpoint.FloatingIP != "")
	}
	if err := r.ensureWireGuardKey(ctx, s); err != nil {
		errs = append(errs, err)
	}
	if s.serviceCIDR.IsValid() {
		if err := r.build(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	switch {
	case s.blocked:
		s.rendered = failed(ReasonEndpointBlocked, "nothing is rendered and no gateway pod runs: "+s.endpoint.outcome.message)
		if err := r.removeDeployment(ctx, s); err != nil {
			errs = append(errs, err)
		}
	case s.built != nil:
		if err := r.applyChildren(ctx, s, s.built, nil); err != nil {
			errs = append(errs, err)
		}
	case s.rendered.reason == "":
		if err := r.applyRevocations(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	result.RequeueAfter = minPositive(result.RequeueAfter, s.rolloutRetry)
	if !s.rolloutGated {
		r.rollouts.leave(types.NamespacedName{Namespace: s.gw.Namespace, Name: children.NameFor(s.kind, s.gw.Name)})
	}
	if err := r.observeDeployment(ctx, s); err != nil {
		errs = append(errs, err)
	}
	if err := r.observeAvailability(ctx, s); err != nil {
		errs = append(errs, err)
	}
	write := r.writeStatus
	if s.kind == model.KindIPsecGateway {
		write = r.writeLegacyStatus
	}
	if err := write(ctx, s); err != nil {
		errs = append(errs, err)
	}
	return result, errors.Join(errs...)
}

func (r *GatewayReconciler) finalize(ctx context.Context, gw *vpnv1.VPNGateway) error {
	if !controllerutil.ContainsFinalizer(gw, FinalizerAddresses) {
		return nil
	}
	// Cloud resources go first; the finalizer stays until they are gone (a pinned floating IP
	// is only disassociated).
	if err := r.Endpoints.DeleteAll(ctx, endpointRequest("", gw, nil)); err != nil {
		return fmt.Errorf("deleting the public endpoint: %w", err)
	}
	r.alloc.release("", gw.Namespace, gw.Name)
	forgetGateway(gw.Namespace, gw.Name)
	r.written.forget(client.ObjectKeyFromObject(gw))
	r.rollouts.forget(types.NamespacedName{Namespace: gw.Namespace, Name: children.NameFor("", gw.Name)})
	patch := client.MergeFrom(gw.DeepCopy())
	controllerutil.RemoveFinalizer(gw, FinalizerAddresses)
	if err := r.Client.Patch(ctx, gw, patch); err != nil {
		return fmt.Errorf("removing finalizer: %w", err)
	}
	r.Recorder.Eventf(gw, nil, corev1.EventTypeNormal, "AddressesReleased", "Delete", "released service CIDR %s", gw.Status.ServiceCIDR)
	return nil
}

func (r *GatewayReconciler) loadPeers(ctx context.Context, s *gatewayScope) error {
	var list vpnv1.VPNPeerList
	if err := r.Client.List(ctx, &list, client.InNamespace(s.gw.Namespace), client.MatchingFields{IndexPeerGateway: s.gw.Name}); err != nil {
		return fmt.Errorf("listing peers: %w", err)
	}
	for _, p := range list.Items {
		if p.DeletionTimestamp.IsZero() {
			s.peers = append(s.peers, p)
		}
	}
	return nil
}

func (r *GatewayReconciler) allocateServiceCIDR(s *gatewayScope, result *ctrl.Result) {
	gw := s.gw
	if req, err := netip.ParsePrefix(gw.Spec.ServiceCIDR); err == nil && gw.Status.ServiceCIDR == "" {
		if msg, refused := model.ServiceCIDRRefusal(req, r.Options.Model); refused {
			s.addresses = failed(ReasonServiceCIDRReserved, msg)
			return
		}
	}
	cidr, err := r.alloc.serviceCIDRFor(s.kind, gw)
	var conflict *ipam.ConflictError
	var limit *LimitError
	switch {
	case errors.As(err, &limit):
		s.addresses = failed(ReasonNamespaceLimitReached, limit.Error())
		return
	case errors.Is(err, ipam.ErrExhausted):
		s.addresses = failed(ReasonPoolExhausted, fmt.Sprintf("no free /24 left in the service CIDR pool %s; set spec.serviceCIDR or enlarge the pool", r.Options.Model.PoolCIDR))
		result.RequeueAfter = r.poolRetry
		return
	case errors.As(err, &conflict):
		s.addresses = failed(ReasonServiceCIDRConflict, fmt.Sprintf("service CIDR %s overlaps %s of gateway %s", conflict.CIDR, conflict.Held, conflict.Owner))
		return
	case err != nil:
		s.addresses = failed(ReasonServiceCIDRConflict, err.Error())
		return
	}
	s.serviceCIDR = cidr
	s.addresses = ok(ReasonAllocated, "service CIDR "+cidr.String())
	if gw.Spec.ServiceCIDR != "" && gw.Status.ServiceCIDR != "" && gw.Spec.ServiceCIDR != gw.Status.ServiceCIDR {
		s.addresses = failed(ReasonServiceCIDRChanged, fmt.Sprintf("spec.serviceCIDR %s differs from the service CIDR in use (%s), which clients depend on; delete and recreate the gateway to change it", gw.Spec.ServiceCIDR, gw.Status.ServiceCIDR))
	}
}

// build resolves exposure target Services and runs the model.
func (r *GatewayReconciler) build(ctx context.Context, s *gatewayScope) error {
	services := map[string]model.ServiceTarget{}
	toEndpoint := s.gw.Spec.Endpoint.HostNetwork != nil
	for _, e := range s.gw.Spec.Exposures {
		if e.Target.Service == nil {
			continue
		}
		svc := &corev1.Service{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.gw.Namespace, Name: e.Target.Service.Name}, svc)
		if apierrors.IsNotFound(err) {
			continue // the model reports TargetServiceNotFound
		} else if err != nil {
			return fmt.Errorf("getting service %s: %w", e.Target.Service.Name, err)
		}
		var endpoints discoveryv1.EndpointSliceList
		if toEndpoint {
			if err := r.Client.List(ctx, &endpoints, client.InNamespace(svc.Namespace),
				client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
				return fmt.Errorf("listing the endpoints of service %s: %w", svc.Name, err)
			}
		}
		services[svc.Name] = serviceTarget(svc, endpoints.Items, toEndpoint)
	}
	nodes, err := r.nodeAddresses(ctx)
	if err != nil {
		return err
	}
	refused, err := refusedSecrets(ctx, r.Secrets, s.gw.Namespace, s.peers)
	if err != nil {
		return err
	}
	clients, err := r.reverseClients(ctx, s.gw)
	if err != nil {
		return err
	}
	serviceIPs, err := r.reverseServiceIPs(ctx, s.gw)
	if err != nil {
		return err
	}
	links, err := ReadyLinks(ctx, r.Client)
	if err != nil {
		return err
	}
	s.input = model.Input{
		Gateway:           s.gw,
		Kind:              s.kind,
		Peers:             s.peers,
		Config:            r.Options.Model,
		ServiceCIDR:       s.serviceCIDR,
		Services:          services,
		PublicAddress:     s.endpoint.publicAddress,
		Uplink:            uplinkOf(s.endpoint.pod.NetworkAttachment),
		NodeAddresses:     nodes,
		OtherServiceCIDRs: r.alloc.othersHolding(s.kind, s.gw, targetAddresses(s.gw, services)),
		RefusedSecrets:    refused,
		ReverseClients:    clients,
		ReverseServiceIPs: serviceIPs,
		Links:             links,
	}
	s.built, s.buildErrs = model.Build(s.input)
	if s.built == nil && len(s.buildErrs) > 0 && !s.configWasInvalid() {
		r.Recorder.Eventf(s.obj, nil, corev1.EventTypeWarning, s.buildErrs[0].Reason, "Validate", "%s", truncate(joinErrors(s.buildErrs), 1000))
	}
	return nil
}

// hostNetworkPermitted decides whether the gateway may use a host-network endpoint: only in
// namespaces the admin selected (Options.HostNetworkNamespaces). Other endpoints always may.
// HostNetworkNamespacePermitted says whether a namespace may run host-network gateways: its
// labels match the admin's selector (nil: no namespace).
func HostNetworkNamespacePermitted(r client.Reader, sel labels.Selector) func(ctx context.Context, namespace string) (bool, error) {
	return func(ctx context.Context, namespace string) (bool, error) {
		ns := &corev1.Namespace{}
		if err := r.Get(ctx, types.NamespacedName{Name: namespace}, ns); err != nil {
			return false, err
		}
		return sel != nil && sel.Matches(labels.Set(ns.Labels)), nil
	}
}

func (r *GatewayReconciler) hostNetworkPermitted(ctx context.Context, s *gatewayScope) (bool, error) {
	if s.gw.Spec.Endpoint.HostNetwork == nil {
		return true, nil
	}
	sel := r.Options.HostNetworkNamespaces
	if ok, err := HostNetworkNamespacePermitted(r.Client, sel)(ctx, s.gw.Namespace); err != nil {
		return false, fmt.Errorf("reading namespace %s: %w", s.gw.Namespace, err)
	} else if ok {
		return true, nil
	}
	allowed := "no namespace"
	if sel != nil {
		allowed = "namespaces labelled " + sel.String()
	}
	s.blocked = true
	s.endpoint.outcome = failed(ReasonNotPermitted, fmt.Sprintf(
		"namespace %q may not run host-network gateways: the cluster admin allows them in %s (operator setting --host-network-namespace-selector)",
		s.gw.Namespace, allowed))
	return false, nil
}

// removeDeployment deletes the gateway's Deployment, if any: a blocked gateway runs no pod.
func (r *GatewayReconciler) removeDeployment(ctx context.Context, s *gatewayScope) error {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: s.gw.Namespace, Name: children.NameFor(s.kind, s.gw.Name)}}
	r.rollouts.forget(client.ObjectKeyFromObject(d))
	if err := r.Client.Delete(ctx, d); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the Deployment of a blocked gateway: %w", err)
	}
	return nil
}

// refusedSecrets are the peers' credential Secrets that exist and may not hold credentials
// (model.CredentialSecretAllowed), by name with their type. Secrets are read directly (never
// cached) and only their type is looked at.
func refusedSecrets(ctx context.Context, secrets *SecretFacts, namespace string, peers []vpnv1.VPNPeer) (map[string]string, error) {
	facts, err := secrets.getAll(ctx, namespace, secretsOfPeers(peers))
	if err != nil {
		return nil, err
	}
	var out map[string]string
	for n, sec := range facts {
		if sec.found && !model.CredentialSecretAllowed(string(sec.typ)) {
			if out == nil {
				out = map[string]string{}
			}
			out[n] = string(sec.typ)
		}
	}
	return out, nil
}

// secretsOfPeers are the Secrets the peers' tunnels need.
func secretsOfPeers(peers []vpnv1.VPNPeer) []string {
	var names []string
	for i := range peers {
		names = append(names, peerSecretNames(&peers[i])...)
	}
	return names
}

// nodeAddresses lists every node's addresses (exposure targets may not be a node).
func (r *GatewayReconciler) nodeAddresses(ctx context.Context) ([]netip.Addr, error) {
	var nodes corev1.NodeList
	// Read only, here: no copy of every node on every pass.
	if err := r.Client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	var out []netip.Addr
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}

// targetAddresses are the exposures' target addresses, literal or resolved.
func targetAddresses(gw *vpnv1.VPNGateway, services map[string]model.ServiceTarget) []netip.Addr {
	var out []netip.Addr
	for _, e := range gw.Spec.Exposures {
		if a, err := netip.ParseAddr(e.Target.Address); err == nil {
			out = append(out, a)
		}
		if e.Target.Service != nil {
			if st, ok := services[e.Target.Service.Name]; ok && st.Address.IsValid() {
				out = append(out, st.Address)
			}
		}
	}
	return out
}

// maxRevokedLines bounds what AnnotationRevoked keeps (the Rendered message names fewer).
const maxRevokedLines = 64

// applyRevocations handles a gateway whose configuration is not valid: the last applied
// configuration stays in place, but only as far as the current spec still grants it
// (model.Restrict): a grant removed, a peer deleted, a subnet withdrawn is applied at once.
// What was taken out is kept on the ConfigMap (AnnotationRevoked) and named by Rendered
// for as long as the configuration stays invalid.
func (r *GatewayReconciler) applyRevocations(ctx context.Context, s *gatewayScope) error {
	const stays = "configuration is not valid; the last applied configuration stays in place"
	s.rendered = failed(ReasonConfigInvalid, stays)
	if s.input.Gateway == nil || s.blocked {
		return nil
	}
	last, earlier, err := r.lastApplied(ctx, s)
	if err != nil || last == nil {
		return err
	}
	restricted, revoked := model.Restrict(last, s.input)
	all := earlier
	for _, line := range revoked {
		if !slices.Contains(all, line) && len(all) < maxRevokedLines {
			all = append(all, line)
		}
	}
	if len(revoked) > 0 {
		if err := r.applyChildren(ctx, s, restricted, all); err != nil {
			return err
		}
		if s.rendered.status != metav1.ConditionTrue {
			return nil
		}
	}
	if len(all) > 0 {
		s.rendered = failed(ReasonConfigInvalid, stays+", reduced to what the current spec still grants; revoked: "+model.RevokedSummary(all, 8))
	} else {
		s.rendered = failed(ReasonConfigInvalid, stays)
	}
	return nil
}

// lastApplied is the model in the gateway's ConfigMap (what its agent runs) and what was
// already revoked from it, or a nil model when there is none of this gateway object's.
func (r *GatewayReconciler) lastApplied(ctx context.Context, s *gatewayScope) (*model.Gateway, []string, error) {
	cm := &corev1.ConfigMap{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.gw.Namespace, Name: children.ConfigMapNameFor(s.kind, s.gw.Name)}, cm)
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	} else if err != nil {
		return nil, nil, fmt.Errorf("reading the applied configuration: %w", err)
	}
	m, err := render.DecodeModel([]byte(cm.Data[render.KeyModel]))
	if err != nil || m.UID != s.obj.GetUID() {
		// Not a model this gateway's operator wrote (the child is restored on the next valid
		// configuration); nothing to reduce.
		return nil, nil, nil
	}
	var revoked []string
	if a := cm.Annotations[AnnotationRevoked]; a != "" {
		revoked = strings.Split(a, "\n")
	}
	return m, revoked, nil
}

func (s *gatewayScope) configWasInvalid() bool {
	for _, c := range s.gw.Status.Conditions {
		if c.Type == vpnv1.ConditionConfigValid {
			return c.Status == metav1.ConditionFalse && c.ObservedGeneration == s.gw.Generation
		}
	}
	return false
}

// applyChildren renders m (the built model, or the last good one restricted, with what was
// revoked from it) into the gateway's children and applies them.
func (r *GatewayReconciler) applyChildren(ctx context.Context, s *gatewayScope, m *model.Gateway, revoked []string) error {
	owner := s.owner()
	kids, err := children.Render(m, owner, r.Options.Render)
	if err != nil {
		s.rendered = failed(ReasonRenderFailed, err.Error())
		return nil // a render error is a condition, not a retry
	}
	bundle, err := render.Render(m, render.Options{UserspaceDataplane: r.Options.Render.UserspaceDataplane})
	if err != nil {
		s.rendered = failed(ReasonRenderFailed, err.Error()+"; the last applied configuration stays in place")
		return nil
	}
	data, err := bundle.ConfigMapData()
	if err != nil {
		s.rendered = failed(ReasonRenderFailed, err.Error())
		return nil
	}
	att := s.endpoint.pod.NetworkAttachment
	if att != nil {
		kids.Deployment.Spec.Template.WithAnnotations(map[string]string{cloud.NetworksAnnotation: att.PodAnnotation()})
	}
	if kids, err = r.gateRollout(ctx, s, m, owner, kids); err != nil {
		s.rendered = failed(ReasonApplyFailed, err.Error())
		return err
	}
	kids.ConfigMap.WithData(data)
	if len(revoked) > 0 {
		kids.ConfigMap.WithAnnotations(map[string]string{AnnotationRevoked: strings.Join(revoked, "\n")})
	}
	if att != nil {
		nad, err := networkAttachment(att, owner)
		if err != nil {
			s.rendered = failed(ReasonRenderFailed, err.Error())
			return nil
		}
		if err := applyNetworkAttachment(ctx, r.Client, nad); err != nil {
			s.rendered = failed(ReasonApplyFailed, err.Error())
			return err
		}
	}
	if kids.ReverseServices, err = r.claimReverseServices(ctx, s, kids.ReverseServices); err != nil {
		s.rendered = failed(ReasonApplyFailed, err.Error())
		return err
	}
	restored, err := applyAll(ctx, r.Client, r.APIReader, s.gw.Namespace, kids)
	if err == nil && kids.Lease != nil {
		err = ensureLease(ctx, r.Client, kids.Lease, owner)
	} else if err == nil {
		err = pruneStandby(ctx, r.Client, s.kind, s.obj)
	}
	for _, c := range restored {
		childrenRestored.WithLabelValues(s.gw.Namespace, s.gw.Name, c.Kind).Inc()
		// The child is the Event's related object: events of one gateway with one reason are
		// otherwise counted as a series of the first, and each child's restore must show.
		r.Recorder.Eventf(s.obj, c.Object, corev1.EventTypeWarning, ReasonChildRestored, "Restore",
			"%s %s was changed outside the operator (%s): restored to its rendering", c.Kind, c.Name, truncate(c.By, 600))
	}
	if err != nil {
		s.rendered = failed(ReasonApplyFailed, err.Error())
		return err
	}
	if err := r.pruneReverseServices(ctx, s); err != nil {
		s.rendered = failed(ReasonApplyFailed, err.Error())
		return err
	}
	s.rendered = ok(ReasonApplied, fmt.Sprintf("configuration of generation %d applied", s.gw.Generation))
	return nil
}

func (r *GatewayReconciler) observeDeployment(ctx context.Context, s *gatewayScope) error {
	d := &appsv1.Deployment{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.gw.Namespace, Name: children.NameFor(s.kind, s.gw.Name)}, d)
	switch {
	case apierrors.IsNotFound(err) && s.rendered.status == metav1.ConditionTrue:
		// Applied in this pass, not yet in the cache: it exists, with no pod ready yet (saying
		// so now saves a second status write when the cache catches up).
		s.deployment = &appsv1.Deployment{}
		return nil
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	s.deployment = d
	return nil
}

func (r *GatewayReconciler) writeStatus(ctx context.Context, s *gatewayScope) error {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	desired := computeGatewayStatus(s, now)
	observeGateway(s.gw, &desired)
	if equality.Semantic.DeepEqual(desired, s.gw.Status) {
		if len(s.stale) > 1 { // a finalizer added in this pass the cache may not show yet
			r.written.record(s.stale, s.gw)
		}
		return nil
	}
	r.recordTransitions(s.gw, s.gw.Status.Conditions, desired.Conditions)
	if err := applyStatus(ctx, r.Client, s.gw, "VPNGateway", &desired); err != nil {
		return err
	}
	known := s.gw.DeepCopy()
	known.Status = desired
	r.written.record(s.stale, known)
	return nil
}

// recordTransitions emits an event on obj when its Ready condition changes, and when it starts
// or stops waiting for new gateway images (RolloutPending).
func (r *GatewayReconciler) recordTransitions(obj client.Object, before, after []metav1.Condition) {
	recordRolloutTransition(r.Recorder, obj, before, after)
	was := findCondition(before, vpnv1.ConditionReady)
	now := findCondition(after, vpnv1.ConditionReady)
	if now == nil || (was != nil && was.Status == now.Status && was.Reason == now.Reason) {
		return
	}
	// A first status saying the gateway serves, or that its pod is still starting, is visible
	// in the condition: events are for problems and for changes.
	if was == nil && (now.Status == metav1.ConditionTrue || now.Reason == ReasonNotCreated || now.Reason == ReasonUnavailable) {
		return
	}
	kind := corev1.EventTypeNormal
	if now.Status != metav1.ConditionTrue {
		kind = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(obj, nil, kind, now.Reason, "Reconcile", "%s", truncate(now.Message, 1000))
}

func findCondition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// minPositive is the smaller of two durations, ignoring zeros.
func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}
