package controller

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/kube"
	"github.com/bnerd/bnerd-vpn-operator/internal/legacy"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// +kubebuilder:rbac:groups=ipsec.bnerd.net,resources=clusterlinks,verbs=get;list;watch
// +kubebuilder:rbac:groups=ipsec.bnerd.net,resources=clusterlinks/status,verbs=get;update;patch

// KindClusterLink is the kind of the cluster-scoped ClusterLink.
const KindClusterLink = "ClusterLink"

// ClusterLinkReconciler decides every ClusterLink's Ready condition (model.DecideLinks: its
// ranges against the peers' subnets, the gateways' service CIDRs, the cluster's ranges and the
// older links) and lists the gateways using it. It is the links' only status writer; the
// gateway reconcilers read the Ready condition (ReadyLinks) and route to ready links.
type ClusterLinkReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Model    model.Config
}

// SetupWithManager registers the reconciler. Whether one link is ready depends on the others,
// on every peer's subnets and every gateway's service CIDR, so any of those changing rechecks
// every link (links are few; each pass is a pure decision over the cache).
func (r *ClusterLinkReconciler) SetupWithManager(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(r.allLinks)
	return ctrl.NewControllerManagedBy(mgr).
		For(&ipsecv1.ClusterLink{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&ipsecv1.ClusterLink{}, all, builder.WithPredicates(predicate.Funcs{
			// another link's spec or existence: older wins
			UpdateFunc: func(e event.UpdateEvent) bool { return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() },
		})).
		Watches(&vpnv1.VPNPeer{}, all, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&vpnv1.VPNGateway{}, all, builder.WithPredicates(gatewayListingChanged)).
		Watches(&ipsecv1.IPsecGateway{}, all, builder.WithPredicates(gatewayListingChanged)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Named("clusterlink").
		Complete(r)
}

// gatewayListingChanged passes what changes a link's decision or its status.gateways: a
// gateway coming or going, its spec (legacy tunnels' subnets) or its service CIDR.
var gatewayListingChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		if e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
			e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero() {
			return true
		}
		return gatewayServiceCIDR(e.ObjectOld) != gatewayServiceCIDR(e.ObjectNew)
	},
}

func gatewayServiceCIDR(o client.Object) string {
	switch g := o.(type) {
	case *vpnv1.VPNGateway:
		return g.Status.ServiceCIDR
	case *ipsecv1.IPsecGateway:
		return g.Status.ServiceCIDR
	}
	return ""
}

func (r *ClusterLinkReconciler) allLinks(ctx context.Context, _ client.Object) []reconcile.Request {
	return requestsForAll(ctx, r.Client, &ipsecv1.ClusterLinkList{})
}

// Reconcile: read the link, decide all links from the cache, write this link's status once.
func (r *ClusterLinkReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	link := &ipsecv1.ClusterLink{}
	if err := r.Client.Get(ctx, req.NamespacedName, link); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !link.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	in, gateways, err := r.linkInput(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	d, found := model.DecideLinks(in)[link.Name]
	if !found {
		// Not in the cache's list yet (just created): the list event brings it back.
		return ctrl.Result{}, nil
	}
	desired := linkStatus(link, d, gateways, metav1.NewTime(time.Now().Truncate(time.Second)))
	if equality.Semantic.DeepEqual(desired, link.Status) {
		return ctrl.Result{}, nil
	}
	if r.Recorder != nil {
		was := apimeta.FindStatusCondition(link.Status.Conditions, vpnv1.ConditionReady)
		if was == nil || was.Reason != d.Reason {
			kind := corev1.EventTypeNormal
			if !d.Ready {
				kind = corev1.EventTypeWarning
			}
			r.Recorder.Eventf(link, nil, kind, d.Reason, "Reconcile", "%s", truncate(d.Message, 1000))
		}
	}
	err = kube.ApplyStatus(ctx, r.Client, ipsecv1.GroupVersion.WithKind(KindClusterLink), "", link.Name, FieldOwner, &desired)
	if apierrors.IsNotFound(err) {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, err
}

// linkStatus is the whole status the reconciler owns, computed in one place: the Ready
// condition (its transition time kept while the status stays) and, when ready, the gateways
// that route to the link.
func linkStatus(link *ipsecv1.ClusterLink, d model.LinkDecision, gateways []string, now metav1.Time) ipsecv1.ClusterLinkStatus {
	st := ipsecv1.ClusterLinkStatus{ObservedGeneration: link.Generation}
	cond := metav1.Condition{
		Type: vpnv1.ConditionReady, Status: metav1.ConditionFalse, Reason: d.Reason, Message: d.Message,
		ObservedGeneration: link.Generation, LastTransitionTime: now,
	}
	if d.Ready {
		cond.Status = metav1.ConditionTrue
		st.Gateways = gateways
	}
	if was := apimeta.FindStatusCondition(link.Status.Conditions, cond.Type); was != nil && was.Status == cond.Status {
		cond.LastTransitionTime = was.LastTransitionTime
	}
	st.Conditions = []metav1.Condition{cond}
	return st
}

// linkInput gathers the decision's input from the cache: every link, every peer's (and legacy
// tunnel's) declared subnets, every gateway's service CIDR; and the gateways (namespace/name,
// sorted, unique) that route to a ready link: all of them not being deleted.
func (r *ClusterLinkReconciler) linkInput(ctx context.Context) (model.LinkInput, []string, error) {
	in := model.LinkInput{Config: r.Model}
	var links ipsecv1.ClusterLinkList
	if err := r.Client.List(ctx, &links); err != nil {
		return in, nil, fmt.Errorf("listing ClusterLinks: %w", err)
	}
	for _, l := range links.Items {
		if l.DeletionTimestamp.IsZero() {
			in.Links = append(in.Links, model.LinkSpec{Name: l.Name, CIDRs: l.Spec.CIDRs, Via: l.Spec.Via, Created: l.CreationTimestamp.Time})
		}
	}
	var peers vpnv1.VPNPeerList
	if err := r.Client.List(ctx, &peers); err != nil {
		return in, nil, fmt.Errorf("listing VPNPeers: %w", err)
	}
	addPeers := func(label func(p *vpnv1.VPNPeer) string, ps []vpnv1.VPNPeer) {
		for i := range ps {
			p := &ps[i]
			if !p.DeletionTimestamp.IsZero() {
				continue
			}
			for _, s := range model.DeclaredSubnets(p) {
				in.PeerSubnets = append(in.PeerSubnets, model.PeerSubnet{Peer: label(p), Subnet: s, Created: p.CreationTimestamp.Time})
			}
		}
	}
	addPeers(func(p *vpnv1.VPNPeer) string { return p.Namespace + "/" + p.Name }, peers.Items)

	var gateways []string
	addGateway := func(kind, namespace, name, serviceCIDR string) {
		gateways = append(gateways, namespace+"/"+name)
		if c, err := netip.ParsePrefix(serviceCIDR); err == nil {
			label := namespace + "/" + name
			if kind != "" {
				label += " (" + kind + ")"
			}
			in.ServiceCIDRs = append(in.ServiceCIDRs, model.GatewayCIDR{Gateway: label, CIDR: c})
		}
	}
	var vgs vpnv1.VPNGatewayList
	if err := r.Client.List(ctx, &vgs); err != nil {
		return in, nil, fmt.Errorf("listing VPNGateways: %w", err)
	}
	for _, g := range vgs.Items {
		if g.DeletionTimestamp.IsZero() {
			addGateway("", g.Namespace, g.Name, g.Status.ServiceCIDR)
		}
	}
	var lgs ipsecv1.IPsecGatewayList
	if err := r.Client.List(ctx, &lgs); err != nil {
		return in, nil, fmt.Errorf("listing IPsecGateways: %w", err)
	}
	for i := range lgs.Items {
		g := &lgs.Items[i]
		if !g.DeletionTimestamp.IsZero() || Released(g) {
			continue
		}
		addGateway(model.KindIPsecGateway, g.Namespace, g.Name, g.Status.ServiceCIDR)
		_, tunnels := legacy.Translate(g)
		addPeers(func(p *vpnv1.VPNPeer) string {
			return fmt.Sprintf("%s/%s (IPsecGateway %s tunnel)", p.Namespace, p.Name, g.Name)
		}, tunnels)
	}
	slices.Sort(gateways)
	return in, slices.Compact(gateways), nil
}

// ReadyLinks are the ClusterLinks whose Ready condition is True for their current generation,
// as the gateways use them, sorted by name.
func ReadyLinks(ctx context.Context, c client.Reader) ([]model.Link, error) {
	var list ipsecv1.ClusterLinkList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing ClusterLinks: %w", err)
	}
	var out []model.Link
	for _, l := range list.Items {
		if l, ok := readyLink(&l); ok {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b model.Link) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// readyLink is the link as the gateways use it when ready for its current spec.
func readyLink(l *ipsecv1.ClusterLink) (model.Link, bool) {
	c := apimeta.FindStatusCondition(l.Status.Conditions, vpnv1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != l.Generation || !l.DeletionTimestamp.IsZero() {
		return model.Link{}, false
	}
	return model.ParseReadyLink(l.Name, l.Spec.CIDRs, l.Spec.Via)
}

// linkReadinessChanged passes ClusterLink events that change what the gateways use: a ready
// link appearing, going, or changing its ranges or next hop.
var linkReadinessChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { _, ok := readyLink(e.Object.(*ipsecv1.ClusterLink)); return ok },
	DeleteFunc: func(event.DeleteEvent) bool { return true },
	UpdateFunc: func(e event.UpdateEvent) bool {
		a, okA := readyLink(e.ObjectOld.(*ipsecv1.ClusterLink))
		b, okB := readyLink(e.ObjectNew.(*ipsecv1.ClusterLink))
		return okA != okB || a.Via != b.Via || !slices.Equal(a.CIDRs, b.CIDRs)
	},
}

// allGateways enqueues every VPNGateway (a ready link's change reaches every gateway's model).
func (r *GatewayReconciler) allGateways(ctx context.Context, _ client.Object) []reconcile.Request {
	return requestsForAll(ctx, r.Client, &vpnv1.VPNGatewayList{})
}

// allLegacy enqueues every IPsecGateway.
func (r *IPsecGatewayReconciler) allLegacy(ctx context.Context, _ client.Object) []reconcile.Request {
	return requestsOf(r.list(ctx), func(*ipsecv1.IPsecGateway) bool { return true })
}
