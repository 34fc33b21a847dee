package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// Reasons of the uplink binding's events (on the gateway).
const (
	ReasonUplinkBound         = "UplinkBound"
	ReasonUplinkBindingFailed = "UplinkBindingFailed"
)

// DefaultUplinkResync is how often a bound uplink is checked against the cloud again (someone
// may have removed the subport there) when UplinkBindingReconciler.Resync is zero.
const DefaultUplinkResync = 5 * time.Minute

// UplinkBindingReconciler binds a gateway's cloud port (its pod's second NIC, a Multus network
// attachment) to the node the gateway's pod runs on, and moves it when a new pod runs
// elsewhere: the cloud delivers the port's frames to that node only. It reconciles gateway
// pods that have a network attachment; the pod that counts is the gateway's newest scheduled
// pod that is not terminating.
type UplinkBindingReconciler struct {
	client.Client
	Binder   cloud.UplinkBinder
	Recorder events.EventRecorder
	Resync   time.Duration
}

// gatewayOfPod is the gateway (kind, name) a pod belongs to by its labels.
func gatewayOfPod(p *corev1.Pod) (kind, name string, ok bool) {
	if n := p.Labels[children.LabelGateway]; n != "" {
		return "", n, true
	}
	if n := p.Labels[children.LabelIPsecGateway]; n != "" {
		return model.KindIPsecGateway, n, true
	}
	return "", "", false
}

// uplinkPod: a gateway's pod with a network attachment.
func uplinkPod(o client.Object) bool {
	p, ok := o.(*corev1.Pod)
	if !ok || p.Annotations[cloud.NetworksAnnotation] == "" {
		return false
	}
	_, _, ok = gatewayOfPod(p)
	return ok
}

// uplinkPodPlaced lets through a gateway pod with an attachment when it is scheduled or
// starts terminating (another pod may become the one that counts).
var uplinkPodPlaced = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return uplinkPod(e.Object) },
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, cur := e.ObjectOld.(*corev1.Pod), e.ObjectNew.(*corev1.Pod)
		return uplinkPod(cur) && (old.Spec.NodeName != cur.Spec.NodeName || old.DeletionTimestamp.IsZero() != cur.DeletionTimestamp.IsZero())
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(e event.GenericEvent) bool { return uplinkPod(e.Object) },
}

// SetupWithManager registers the controller.
func (r *UplinkBindingReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Resync == 0 {
		r.Resync = DefaultUplinkResync
	}
	return ctrl.NewControllerManagedBy(mgr).Named("uplinkbinding").
		For(&corev1.Pod{}, builder.WithPredicates(uplinkPodPlaced)).
		Complete(r)
}

// activePod is the pod the uplink follows: the newest scheduled, not terminating, not
// finished one; nil when there is none.
func activePod(pods []corev1.Pod) *corev1.Pod {
	var best *corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || !p.DeletionTimestamp.IsZero() || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if best == nil || best.CreationTimestamp.Before(&p.CreationTimestamp) ||
			(best.CreationTimestamp.Equal(&p.CreationTimestamp) && best.Name < p.Name) {
			best = p
		}
	}
	return best
}

// Reconcile binds the uplink of the pod's gateway to the node of the gateway's active pod.
func (r *UplinkBindingReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pod corev1.Pod
	if err := r.Get(ctx, req.NamespacedName, &pod); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	kind, name, ok := gatewayOfPod(&pod)
	if !ok {
		return ctrl.Result{}, nil
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(pod.Namespace), client.MatchingLabels(children.SelectorLabelsFor(kind, name))); err != nil {
		return ctrl.Result{}, err
	}
	active := activePod(pods.Items)
	if active == nil || active.Name != pod.Name {
		return ctrl.Result{}, nil // the active pod's own events bind it
	}
	gw, creq, err := r.gateway(ctx, kind, types.NamespacedName{Namespace: pod.Namespace, Name: name})
	if apierrors.IsNotFound(err) {
		return ctrl.Result{}, nil // going: Delete takes the port off its trunk
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	var node corev1.Node
	if err := r.Get(ctx, types.NamespacedName{Name: active.Spec.NodeName}, &node); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	changed, msg, err := r.Binder.BindUplink(ctx, creq, cloud.Node{Name: node.Name, ProviderID: node.Spec.ProviderID})
	if ce, ok := cloud.AsError(err); ok && ce.Terminal {
		r.Recorder.Eventf(gw, active, corev1.EventTypeWarning, ReasonUplinkBindingFailed, "Bind", "%s", truncate(ce.Message, 1000))
		return ctrl.Result{RequeueAfter: max(ce.RetryAfter, time.Minute)}, nil
	}
	if err != nil {
		return ctrl.Result{}, err // transient: retried with backoff
	}
	if changed {
		log.FromContext(ctx).Info("uplink bound", "gateway", name, "node", node.Name, "detail", msg)
		r.Recorder.Eventf(gw, active, corev1.EventTypeNormal, ReasonUplinkBound, "Bind", "%s", truncate(msg, 1000))
	}
	return ctrl.Result{RequeueAfter: r.Resync}, nil
}

// gateway reads the pod's gateway (its custom resource, for events) and the request the
// binder finds its port by (namespace, name, UID: as Ensure created it).
func (r *UplinkBindingReconciler) gateway(ctx context.Context, kind string, key types.NamespacedName) (client.Object, cloud.Request, error) {
	if kind == model.KindIPsecGateway {
		g := &ipsecv1.IPsecGateway{}
		if err := r.Get(ctx, key, g); err != nil {
			return nil, cloud.Request{}, err
		}
		return g, cloud.Request{Namespace: g.Namespace, Name: g.Name, UID: g.UID, Kind: kind, Protocol: model.ProtocolIPsec}, nil
	}
	g := &vpnv1.VPNGateway{}
	if err := r.Get(ctx, key, g); err != nil {
		return nil, cloud.Request{}, err
	}
	return g, cloud.Request{Namespace: g.Namespace, Name: g.Name, UID: g.UID, Protocol: model.Protocol(g.Spec.Protocol)}, nil
}
