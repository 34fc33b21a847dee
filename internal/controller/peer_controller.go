package controller

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// Peer condition types and reasons set by the operator besides Authorized.
const (
	// ConditionCredentialsReady: the Secrets the peer's tunnel needs exist and hold the key.
	ConditionCredentialsReady = "CredentialsReady"
	ReasonSecretsPresent      = "SecretsPresent"
	ReasonSecretNotFound      = "SecretNotFound"
	ReasonSecretKeyMissing    = "SecretKeyMissing"
	// ReasonSecretTypeNotAllowed: the Secret is not Opaque (a ServiceAccount token, TLS or
	// registry credentials): it is not read and the peer gets no tunnel.
	ReasonSecretTypeNotAllowed = "SecretTypeNotAllowed"
)

// PeerReconciler decides each VPNPeer's Authorized condition. A peer's decision depends on its
// siblings (a second peer flips the gateway to default-deny), so any peer change re-evaluates
// every peer of the same gateway.
type PeerReconciler struct {
	Client client.Client
	// Secrets tells the Secrets' types and keys (shared with the GatewayReconciler).
	Secrets  *SecretFacts
	Recorder events.EventRecorder
	// Model is the operator's configuration the decision depends on (the cluster's ranges).
	Model model.Config
	// written: what the last pass wrote to each peer, for passes that start before the cache
	// shows it.
	written written[*vpnv1.VPNPeer]
}

// SetupWithManager registers the reconciler and its watches.
func (r *PeerReconciler) SetupWithManager(mgr ctrl.Manager, concurrency int) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&vpnv1.VPNPeer{}, builder.WithPredicates(notStatusOnly)).
		// Siblings and the gateway change a peer's decision through their spec (and existence) only.
		Watches(&vpnv1.VPNPeer{}, handler.EnqueueRequestsFromMapFunc(r.siblings), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// ... and through the service CIDR and public address it was given (the scope).
		Watches(&vpnv1.VPNGateway{}, handler.EnqueueRequestsFromMapFunc(r.peersOfGateway),
			builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, scopeChanged))).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.peersOfSecret)).
		// A ready ClusterLink's ranges are withheld from the peers (as the gateway's model does).
		Watches(&ipsecv1.ClusterLink{}, handler.EnqueueRequestsFromMapFunc(r.allPeers), builder.WithPredicates(linkReadinessChanged)).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency}).
		Named("vpnpeer").
		Complete(r)
}

func (r *PeerReconciler) peersBy(ctx context.Context, namespace, field, value string) []reconcile.Request {
	var list vpnv1.VPNPeerList
	if err := r.Client.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{field: value}); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

func (r *PeerReconciler) siblings(ctx context.Context, o client.Object) []reconcile.Request {
	return r.peersBy(ctx, o.GetNamespace(), IndexPeerGateway, o.(*vpnv1.VPNPeer).Spec.GatewayRef)
}

func (r *PeerReconciler) peersOfGateway(ctx context.Context, o client.Object) []reconcile.Request {
	return r.peersBy(ctx, o.GetNamespace(), IndexPeerGateway, o.GetName())
}

func (r *PeerReconciler) peersOfSecret(ctx context.Context, o client.Object) []reconcile.Request {
	return r.peersBy(ctx, o.GetNamespace(), IndexPeerSecret, o.GetName())
}

// Reconcile computes the peer's Authorized and CredentialsReady conditions and writes them
// (with the operator's field manager; the gateway agent owns Connected) only when they change.
func (r *PeerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	peer := &vpnv1.VPNPeer{}
	if err := r.Client.Get(ctx, req.NamespacedName, peer); err != nil {
		if apierrors.IsNotFound(err) {
			r.written.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	peer, stale := r.written.recall(peer)
	if !peer.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	creds, refused, err := r.credentials(ctx, peer)
	if err != nil {
		return ctrl.Result{}, err
	}
	decision, err := r.decide(ctx, peer, refused)
	if err != nil {
		return ctrl.Result{}, err
	}

	now := metav1.NewTime(time.Now().Truncate(time.Second))
	// Only the operator's conditions are applied; the agent's Connected stays its own.
	var conds []metav1.Condition
	for _, t := range []string{vpnv1.ConditionAuthorized, ConditionCredentialsReady} {
		if c := meta.FindStatusCondition(peer.Status.Conditions, t); c != nil {
			conds = append(conds, *c)
		}
	}
	authz := outcome{metav1.ConditionFalse, decision.Reason, decision.Message}
	if decision.Authorized {
		authz.status = metav1.ConditionTrue
	}
	setCondition(&conds, vpnv1.ConditionAuthorized, authz, peer.Generation, now)
	setCondition(&conds, ConditionCredentialsReady, creds, peer.Generation, now)

	if peer.Status.ObservedGeneration == peer.Generation && sameConditions(peer.Status.Conditions, conds) {
		return ctrl.Result{}, nil
	}
	r.recordTransition(peer, conds)
	status := &vpnv1.VPNPeerStatus{ObservedGeneration: peer.Generation, Conditions: conds}
	if err := applyStatus(ctx, r.Client, peer, "VPNPeer", status); err != nil {
		return ctrl.Result{}, err
	}
	known := peer.DeepCopy()
	known.Status.ObservedGeneration = peer.Generation
	for _, c := range conds {
		meta.RemoveStatusCondition(&known.Status.Conditions, c.Type)
		known.Status.Conditions = append(known.Status.Conditions, c)
	}
	r.written.record(stale, known)
	return ctrl.Result{}, nil
}

// decide runs the model's authorization over the peer's gateway and all its siblings.
func (r *PeerReconciler) decide(ctx context.Context, peer *vpnv1.VPNPeer, refused map[string]string) (model.Decision, error) {
	gw := &vpnv1.VPNGateway{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: peer.Namespace, Name: peer.Spec.GatewayRef}, gw)
	if apierrors.IsNotFound(err) {
		return model.Decision{Reason: model.ReasonGatewayNotFound,
			Message: fmt.Sprintf("VPNGateway %q does not exist in namespace %q", peer.Spec.GatewayRef, peer.Namespace)}, nil
	} else if err != nil {
		return model.Decision{}, err
	}
	var list vpnv1.VPNPeerList
	if err := r.Client.List(ctx, &list, client.InNamespace(peer.Namespace), client.MatchingFields{IndexPeerGateway: gw.Name}); err != nil {
		return model.Decision{}, err
	}
	peers := make([]vpnv1.VPNPeer, 0, len(list.Items))
	for _, p := range list.Items {
		if p.DeletionTimestamp.IsZero() {
			peers = append(peers, p)
		}
	}
	scope := PeerScope(gw, r.Model)
	if scope.Links, err = ReadyLinks(ctx, r.Client); err != nil {
		return model.Decision{}, err
	}
	scope.RefusedSecrets = refused // only the peer's own credentials decide its own tunnel
	decisions, _ := model.Authorize(gw, peers, scope)
	d, found := decisions[peer.Name]
	if !found { // the cache has not seen this peer in the list yet; try again shortly
		return model.Decision{}, fmt.Errorf("peer %s not yet in the cache's peer list", peer.Name)
	}
	return d, nil
}

// PeerScope is what a gateway's peers are checked against, from what the gateway's status
// says was assigned: the gateway reconciler builds its model from the same values.
func PeerScope(gw *vpnv1.VPNGateway, cfg model.Config) model.Scope {
	scope := model.Scope{LocalID: model.GatewayLocalID(gw, gw.Status.PublicAddress), Config: cfg}
	if c, err := netip.ParsePrefix(gw.Status.ServiceCIDR); err == nil {
		scope.ServiceCIDR = c
	}
	return scope
}

// scopeChanged passes gateway updates that change what peers are checked against.
var scopeChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*vpnv1.VPNGateway)
		n, ok2 := e.ObjectNew.(*vpnv1.VPNGateway)
		return ok1 && ok2 && (o.Status.ServiceCIDR != n.Status.ServiceCIDR || o.Status.PublicAddress != n.Status.PublicAddress)
	},
}

// credentials checks that the Secrets the peer needs exist, are fit to hold tunnel
// credentials and hold their keys, without ever reading the values into anything that is
// logged or stored. refused are the peer's Secrets unfit for credentials, by name with type.
func (r *PeerReconciler) credentials(ctx context.Context, peer *vpnv1.VPNPeer) (outcome, map[string]string, error) {
	var refs []vpnv1.SecretKeyRef
	if peer.Spec.IPsec != nil {
		refs = append(refs, peer.Spec.IPsec.PSKSecretRef)
	}
	if peer.Spec.WireGuard != nil && peer.Spec.WireGuard.PresharedKeySecretRef != nil {
		refs = append(refs, *peer.Spec.WireGuard.PresharedKeySecretRef)
	}
	// The siblings' passes follow this one: their Secrets are read together with its own, at
	// once, rather than one round trip at the start of each pass.
	var siblings vpnv1.VPNPeerList
	if err := r.Client.List(ctx, &siblings, client.InNamespace(peer.Namespace), client.MatchingFields{IndexPeerGateway: peer.Spec.GatewayRef}, client.UnsafeDisableDeepCopy); err != nil {
		return outcome{}, nil, err
	}
	if _, err := r.Secrets.getAll(ctx, peer.Namespace, append(secretsOfPeers(siblings.Items), peerSecretNames(peer)...)); err != nil {
		return outcome{}, nil, err
	}
	result := ok(ReasonSecretsPresent, "referenced Secrets exist")
	var refused map[string]string
	for _, ref := range refs {
		s, err := r.Secrets.get(ctx, types.NamespacedName{Namespace: peer.Namespace, Name: ref.Name})
		switch {
		case err != nil:
			return outcome{}, nil, err
		case !s.found:
			if result.status == metav1.ConditionTrue {
				result = failed(ReasonSecretNotFound, fmt.Sprintf("Secret %q does not exist", ref.Name))
			}
			continue
		}
		if !model.CredentialSecretAllowed(string(s.typ)) {
			if refused == nil {
				refused = map[string]string{}
			}
			refused[ref.Name] = string(s.typ)
			result = failed(ReasonSecretTypeNotAllowed, fmt.Sprintf("Secret %q is of type %q; pre-shared keys must be kept in Opaque Secrets: it is not read and the peer gets no tunnel", ref.Name, s.typ))
			continue
		}
		if !s.keys[ref.Key] && result.status == metav1.ConditionTrue {
			result = failed(ReasonSecretKeyMissing, fmt.Sprintf("Secret %q has no non-empty key %q", ref.Name, ref.Key))
		}
	}
	return result, refused, nil
}

func (r *PeerReconciler) recordTransition(peer *vpnv1.VPNPeer, conds []metav1.Condition) {
	was := meta.FindStatusCondition(peer.Status.Conditions, vpnv1.ConditionAuthorized)
	now := meta.FindStatusCondition(conds, vpnv1.ConditionAuthorized)
	// A first grant is visible in the condition; events are for denials and for changes.
	if (was == nil && now.Status == metav1.ConditionTrue) || (was != nil && was.Status == now.Status && was.Reason == now.Reason) {
		return
	}
	kind := corev1.EventTypeNormal
	if now.Status != metav1.ConditionTrue {
		kind = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(peer, nil, kind, now.Reason, "Authorize", "%s", truncate(now.Message, 1000))
}

// sameConditions reports whether every condition in want is already in have, unchanged.
func sameConditions(have, want []metav1.Condition) bool {
	for _, w := range want {
		h := meta.FindStatusCondition(have, w.Type)
		if h == nil || h.Status != w.Status || h.Reason != w.Reason || h.Message != w.Message || h.ObservedGeneration != w.ObservedGeneration {
			return false
		}
	}
	return true
}

// allPeers enqueues every VPNPeer.
func (r *PeerReconciler) allPeers(ctx context.Context, _ client.Object) []reconcile.Request {
	return requestsForAll(ctx, r.Client, &vpnv1.VPNPeerList{})
}
