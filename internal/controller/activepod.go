package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch

// A gateway with a standby runs two pods whose agents elect the active one through the
// gateway's Lease (children.ActiveLeaseNameFor). The ActivePodReconciler makes the cluster
// follow the election: the pod the Lease names (spec.holderIdentity) is labelled
// children.LabelRole: children.RoleActive — the gateway's LoadBalancer Service selects only
// that pod — and every other pod of the gateway loses the label. Each pod's pod-deletion-cost
// says which to remove first (the standby), so a rollout or scale-down replaces the standby
// and the active hands over once. The Lease is written by the agents, which face the
// internet: its holder is obeyed only when it names one of the gateway's own pods.
//
// A Lease change reaches the pods' labels within one watch event and one patch per pod: the
// controller watches the Leases (renewals, which change nothing else, are filtered out) and
// the gateway pods, and never waits to requeue.

// ActivePodReconciler labels the active pod of every gateway with a standby.
type ActivePodReconciler struct {
	Client client.Client
}

// SetupWithManager registers the reconciler: one reconcile per Lease.
func (r *ActivePodReconciler) SetupWithManager(mgr ctrl.Manager, concurrency int) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&coordinationv1.Lease{}, builder.WithPredicates(activeLeaseChanged)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(leaseOfPod), builder.WithPredicates(gatewayPodChanged)).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency}).
		Named("activepod").
		Complete(r)
}

// isActiveLease: the Lease is named as a gateway's (the agents may change anything else about
// it, its labels included).
func isActiveLease(o client.Object) bool {
	_, _, ok := children.GatewayOfActiveLease(o.GetName())
	return ok
}

// activeLeaseChanged lets through a gateway Lease's creation, deletion and a change of its
// holder; not its renewals (every 500 ms).
var activeLeaseChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return isActiveLease(e.Object) },
	DeleteFunc: func(e event.DeleteEvent) bool { return isActiveLease(e.Object) },
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, cur := e.ObjectOld.(*coordinationv1.Lease), e.ObjectNew.(*coordinationv1.Lease)
		return isActiveLease(cur) && leaseHolder(old) != leaseHolder(cur)
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// gatewayPodChanged lets through a gateway pod's creation and deletion, and a change of what
// the role depends on or sets: its role label, deletion cost, termination or phase.
var gatewayPodChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return isGatewayPod(e.Object) },
	DeleteFunc: func(e event.DeleteEvent) bool { return isGatewayPod(e.Object) },
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, cur := e.ObjectOld.(*corev1.Pod), e.ObjectNew.(*corev1.Pod)
		return isGatewayPod(cur) && (old.Labels[children.LabelRole] != cur.Labels[children.LabelRole] ||
			old.Annotations[corev1.PodDeletionCost] != cur.Annotations[corev1.PodDeletionCost] ||
			old.DeletionTimestamp.IsZero() != cur.DeletionTimestamp.IsZero() ||
			old.Status.Phase != cur.Status.Phase)
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func isGatewayPod(o client.Object) bool {
	_, _, ok := gatewayOfPod(o.(*corev1.Pod))
	return ok
}

// leaseOfPod is the Lease of the gateway a pod belongs to (if that gateway has none, the
// reconcile finds nothing).
func leaseOfPod(_ context.Context, o client.Object) []reconcile.Request {
	kind, gateway, ok := gatewayOfPod(o.(*corev1.Pod))
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: children.ActiveLeaseNameFor(kind, gateway)}}}
}

func leaseHolder(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// Reconcile labels the pod the Lease names as the active one and unlabels the others.
func (r *ActivePodReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	kind, gateway, ok := children.GatewayOfActiveLease(req.Name)
	if !ok {
		return ctrl.Result{}, nil
	}
	lease := &coordinationv1.Lease{}
	if err := r.Client.Get(ctx, req.NamespacedName, lease); err != nil {
		// No Lease: the gateway has no standby (any more); its pods are replaced without one.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(req.Namespace), client.MatchingLabels(children.SelectorLabelsFor(kind, gateway))); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the pods of gateway %s/%s: %w", req.Namespace, gateway, err)
	}
	holder := leaseHolder(lease)
	active := ActivePod(holder, pods.Items)
	if holder != "" && active == "" {
		ctrl.LoggerFrom(ctx).V(1).Info("the Lease names a holder that is not one of the gateway's pods; no pod is active", "holder", truncate(holder, 253))
	}
	for _, p := range RoleChanges(active, pods.Items) {
		if err := r.Client.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: p.Pod}},
			client.RawPatch(types.MergePatchType, p.patch())); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("labelling pod %s of gateway %s/%s: %w", p.Pod, req.Namespace, gateway, err)
		}
	}
	return ctrl.Result{}, nil
}

// podFinished: the pod's containers have stopped for good (an evicted pod lingers so).
func podFinished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// ActivePod is the gateway's active pod: holder when it names one of pods (the gateway's own,
// as its selector labels list them) that has not finished, else "" (no pod is active). A
// holder that is terminating stays active: it carries the tunnels until it has handed the
// Lease over (then it is no longer the holder) or its Lease expires and the standby takes it.
func ActivePod(holder string, pods []corev1.Pod) string {
	if holder == "" {
		return ""
	}
	for i := range pods {
		if pods[i].Name == holder && !podFinished(&pods[i]) {
			return holder
		}
	}
	return ""
}

// RoleChange is what one pod's role label and deletion cost must become.
type RoleChange struct {
	Pod string
	// Active: the pod gets the role label; otherwise it loses it.
	Active bool
	// SetLabel: the label must change; Cost, when not empty, is the new deletion cost.
	SetLabel bool
	Cost     string
}

// patch is the change as a JSON merge patch of the pod's metadata.
func (c RoleChange) patch() []byte {
	meta := map[string]any{}
	if c.SetLabel {
		var v any // null: remove
		if c.Active {
			v = children.RoleActive
		}
		meta["labels"] = map[string]any{children.LabelRole: v}
	}
	if c.Cost != "" {
		meta["annotations"] = map[string]any{corev1.PodDeletionCost: c.Cost}
	}
	b, _ := json.Marshal(map[string]any{"metadata": meta})
	return b
}

// RoleChanges are the changes that make active (possibly "") the one pod of the gateway with
// the role label and the highest deletion cost, and every other pod a standby: no label, the
// lowest cost. The active pod comes first, so for a moment both pods rather than none are
// selected (the old active fenced itself when it saw the new holder). A terminating pod's
// deletion cost no longer matters and is left alone.
func RoleChanges(active string, pods []corev1.Pod) []RoleChange {
	var out []RoleChange
	for i := range pods {
		p := &pods[i]
		label, labelled := p.Labels[children.LabelRole]
		c := RoleChange{Pod: p.Name, Active: active != "" && p.Name == active}
		cost := children.StandbyDeletionCost
		if c.Active {
			cost = children.ActiveDeletionCost
			c.SetLabel = label != children.RoleActive
		} else {
			// Any value of the label on a standby goes: it is the operator's alone.
			c.SetLabel = labelled
		}
		if p.DeletionTimestamp.IsZero() && !podFinished(p) && p.Annotations[corev1.PodDeletionCost] != cost {
			c.Cost = cost
		}
		switch {
		case !c.SetLabel && c.Cost == "":
		case c.Active:
			out = append([]RoleChange{c}, out...)
		default:
			out = append(out, c)
		}
	}
	return out
}

// Bounds of what the status takes from the Lease's last-takeover annotation.
const (
	maxTakeoverAnnotation = 1024
	maxTakeoverOutage     = int64(24 * time.Hour / time.Millisecond)
	maxStandbyPods        = 8
)

// takeoverReasons are the reasons an agent reports a takeover with.
var takeoverReasons = []string{vpnv1.TakeoverActiveGone, vpnv1.TakeoverActiveUnhealthy, vpnv1.TakeoverHandedOver, vpnv1.TakeoverInitial}

// ParseTakeover reads the Lease's last-takeover annotation (children.AnnotationLastTakeover).
// An agent that faces the internet writes it, so nothing in it is trusted: it is bounded in
// length, every field must be well formed (a time, pod names, a known reason, an outage of at
// most a day), and anything else makes it nil, as if there were none.
func ParseTakeover(annotation string) *vpnv1.Takeover {
	if annotation == "" || len(annotation) > maxTakeoverAnnotation {
		return nil
	}
	var raw struct {
		Time         string `json:"time"`
		From         string `json:"from"`
		To           string `json:"to"`
		Reason       string `json:"reason"`
		OutageMillis int64  `json:"outageMillis"`
	}
	if err := json.Unmarshal([]byte(annotation), &raw); err != nil {
		return nil
	}
	at, err := time.Parse(time.RFC3339Nano, raw.Time)
	if err != nil || at.Year() < 2000 || at.Year() > 9999 {
		return nil
	}
	podName := func(s string) bool { return len(validation.IsDNS1123Subdomain(s)) == 0 }
	if !podName(raw.To) || (raw.From != "" && !podName(raw.From)) || !slices.Contains(takeoverReasons, raw.Reason) ||
		raw.OutageMillis < 0 || raw.OutageMillis > maxTakeoverOutage {
		return nil
	}
	return &vpnv1.Takeover{Time: metav1.NewMicroTime(at.UTC().Truncate(time.Microsecond)), From: raw.From, To: raw.To, Reason: raw.Reason, OutageMillis: raw.OutageMillis}
}

// AvailabilityStatus is the status.availability of a gateway with a standby from its Lease
// (nil: not created yet) and its pods: the active pod (ActivePod), the others still running
// as standbys (sorted; at most a few), and the last takeover (ParseTakeover).
func AvailabilityStatus(lease *coordinationv1.Lease, pods []corev1.Pod) *vpnv1.AvailabilityStatus {
	st := &vpnv1.AvailabilityStatus{}
	if lease != nil {
		st.ActivePod = ActivePod(leaseHolder(lease), pods)
		st.LastTakeover = ParseTakeover(lease.Annotations[children.AnnotationLastTakeover])
	}
	for i := range pods {
		p := &pods[i]
		if p.Name != st.ActivePod && p.DeletionTimestamp.IsZero() && !podFinished(p) {
			st.StandbyPods = append(st.StandbyPods, p.Name)
		}
	}
	slices.Sort(st.StandbyPods)
	if len(st.StandbyPods) > maxStandbyPods {
		st.StandbyPods = st.StandbyPods[:maxStandbyPods]
	}
	return st
}
