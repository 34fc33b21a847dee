package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1ac "k8s.io/client-go/applyconfigurations/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete

// The gateway reconciler's share of a gateway with a standby: it creates the gateway's Lease
// (ensureLease), removes the Lease and the PodDisruptionBudget when the standby is turned off
// (pruneStandby), and reports the election in status.availability (observeAvailability). The
// pods' labels follow the Lease in the ActivePodReconciler.

// ensureLease creates the gateway's Lease when it is missing, and otherwise puts back only its
// labels and controller reference. The Lease is not applied as the other children are
// (applyAll): its holder and renew time, and its annotations, are the agents', written every
// 500 ms with Update; applyAll would take those fields over as somebody else's and remove
// them, and an apply owning spec.leaseDurationSeconds would remove it again once left out. So
// the operator creates it (an Update-operation owner of the fields it set) and afterwards
// applies nothing but metadata, which it alone owns, when an agent changed it.
func ensureLease(ctx context.Context, c client.Client, ac *coordinationv1ac.LeaseApplyConfiguration, owner metav1.OwnerReference) error {
	key := types.NamespacedName{Namespace: *ac.Namespace, Name: *ac.Name}
	live := &coordinationv1.Lease{}
	err := c.Get(ctx, key, live)
	switch {
	case apierrors.IsNotFound(err):
		lease := &coordinationv1.Lease{}
		raw, err := json.Marshal(ac)
		if err != nil {
			return fmt.Errorf("encoding Lease %s: %w", key.Name, err)
		}
		if err := json.Unmarshal(raw, lease); err != nil {
			return fmt.Errorf("decoding Lease %s: %w", key.Name, err)
		}
		err = c.Create(ctx, lease, client.FieldOwner(FieldOwner))
		if !apierrors.IsAlreadyExists(err) {
			if err != nil {
				return fmt.Errorf("creating Lease %s: %w", key.Name, err)
			}
			return nil
		}
		// It exists but the cache does not show it: an agent removed the label the cache
		// selects by. Its metadata is put back.
		return applyLeaseMetadata(ctx, c, ac)
	case err != nil:
		return fmt.Errorf("reading Lease %s: %w", key.Name, err)
	}
	if ref := metav1.GetControllerOf(live); ref != nil && ref.UID != owner.UID {
		// An earlier gateway's of the same name (garbage collection pending): it goes, and the
		// next pass (its deletion is watched) creates this gateway's.
		if err := c.Delete(ctx, live, client.Preconditions{UID: &live.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Lease %s of an earlier gateway: %w", key.Name, err)
		}
		return nil
	}
	labelled := true
	for k, v := range ac.Labels {
		labelled = labelled && live.Labels[k] == v
	}
	if ref := metav1.GetControllerOf(live); labelled && ref != nil {
		return nil
	}
	return applyLeaseMetadata(ctx, c, ac)
}

// applyLeaseMetadata server-side applies the Lease's labels and controller reference alone.
func applyLeaseMetadata(ctx context.Context, c client.Client, ac *coordinationv1ac.LeaseApplyConfiguration) error {
	meta := coordinationv1ac.Lease(*ac.Name, *ac.Namespace).
		WithLabels(maps.Clone(ac.Labels)).
		WithOwnerReferences(&ac.OwnerReferences[0])
	if err := c.Apply(ctx, meta, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("restoring the labels and owner of Lease %s: %w", *ac.Name, err)
	}
	return nil
}

// pruneStandby removes the Lease and the PodDisruptionBudget of a gateway that has no standby
// (any more), if they are this gateway's.
func pruneStandby(ctx context.Context, c client.Client, kind string, gw client.Object) error {
	for _, o := range []client.Object{
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: gw.GetNamespace(), Name: children.ActiveLeaseNameFor(kind, gw.GetName())}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: gw.GetNamespace(), Name: children.NameFor(kind, gw.GetName())}},
	} {
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return fmt.Errorf("reading %s: %w", o.GetName(), err)
		}
		if ref := metav1.GetControllerOf(o); ref == nil || ref.UID != gw.GetUID() || !o.GetDeletionTimestamp().IsZero() {
			continue
		}
		uid := o.GetUID()
		if err := c.Delete(ctx, o, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %s of a gateway without a standby: %w", o.GetName(), err)
		}
	}
	return nil
}

// observeAvailability reads the election of a gateway with a standby (its Lease and pods, from
// the cache) into s.availability, for the status; nil without a standby.
func (r *GatewayReconciler) observeAvailability(ctx context.Context, s *gatewayScope) error {
	s.availability = nil
	if !model.StandbyOf(s.kind, s.gw, r.Options.Model) {
		return nil
	}
	lease := &coordinationv1.Lease{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.gw.Namespace, Name: children.ActiveLeaseNameFor(s.kind, s.gw.Name)}, lease)
	switch {
	case apierrors.IsNotFound(err):
		lease = nil
	case err != nil:
		return fmt.Errorf("reading the gateway's Lease: %w", err)
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(s.gw.Namespace), client.MatchingLabels(children.SelectorLabelsFor(s.kind, s.gw.Name))); err != nil {
		return fmt.Errorf("listing the gateway's pods: %w", err)
	}
	s.availability = AvailabilityStatus(lease, pods.Items)
	return nil
}

// leaseEvents lets through what of a gateway's Lease its status shows or the operator set: its
// holder, the last takeover, its labels and owner, its deletion; not its renewals.
var leaseEvents = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	DeleteFunc: func(e event.DeleteEvent) bool { return isActiveLease(e.Object) },
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, cur := e.ObjectOld.(*coordinationv1.Lease), e.ObjectNew.(*coordinationv1.Lease)
		return isActiveLease(cur) && (leaseHolder(old) != leaseHolder(cur) ||
			old.Annotations[children.AnnotationLastTakeover] != cur.Annotations[children.AnnotationLastTakeover] ||
			!maps.Equal(old.Labels, cur.Labels) || !equalOwners(old.OwnerReferences, cur.OwnerReferences))
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func equalOwners(a, b []metav1.OwnerReference) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].UID != b[i].UID || (a[i].Controller == nil) != (b[i].Controller == nil) {
			return false
		}
	}
	return true
}

// vpnGatewayOfPod is the VPNGateway whose pod o is (its standby's pods come and go, change
// role and terminate).
func vpnGatewayOfPod(_ context.Context, o client.Object) []reconcile.Request {
	kind, gateway, ok := gatewayOfPod(o.(*corev1.Pod))
	if !ok || kind != "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: gateway}}}
}
