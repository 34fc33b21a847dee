package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/kube"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// annotatable is what every client-go apply configuration offers for its metadata.
type annotatable interface {
	runtime.ApplyConfiguration
	GetName() *string
}

// child pairs a rendered apply configuration with an empty object of its kind, to look up
// what the cache holds, and with the function that extracts from a live object what the
// operator's field manager applied to it.
type child struct {
	kind     string
	ac       annotatable
	annotate func(map[string]string)
	existing client.Object
	extract  func(client.Object) (any, error)
}

// extractor adapts a client-go Extract function (the fields one manager applied) to child.
func extractor[T client.Object, A any](f func(T, string) (A, error)) func(client.Object) (any, error) {
	return func(o client.Object) (any, error) { return f(o.(T), FieldOwner) }
}

func childrenOf(k *children.Children) []child {
	out := []child{
		{"ServiceAccount", k.ServiceAccount, func(a map[string]string) { k.ServiceAccount.WithAnnotations(a) }, &corev1.ServiceAccount{}, extractor(corev1ac.ExtractServiceAccount)},
		{"Role", k.Role, func(a map[string]string) { k.Role.WithAnnotations(a) }, &rbacv1.Role{}, extractor(rbacv1ac.ExtractRole)},
		{"RoleBinding", k.RoleBinding, func(a map[string]string) { k.RoleBinding.WithAnnotations(a) }, &rbacv1.RoleBinding{}, extractor(rbacv1ac.ExtractRoleBinding)},
		{"ConfigMap", k.ConfigMap, func(a map[string]string) { k.ConfigMap.WithAnnotations(a) }, &corev1.ConfigMap{}, extractor(corev1ac.ExtractConfigMap)},
		{"NetworkPolicy", k.NetworkPolicy, func(a map[string]string) { k.NetworkPolicy.WithAnnotations(a) }, &networkingv1.NetworkPolicy{}, extractor(networkingv1ac.ExtractNetworkPolicy)},
		{"Deployment", k.Deployment, func(a map[string]string) { k.Deployment.WithAnnotations(a) }, &appsv1.Deployment{}, extractor(appsv1ac.ExtractDeployment)},
	}
	for _, svc := range k.ReverseServices {
		out = append(out, child{"Service", svc, func(a map[string]string) { svc.WithAnnotations(a) }, &corev1.Service{}, extractor(corev1ac.ExtractService)})
	}
	// The Lease is not among them: its spec is the agents' (ensureLease).
	if pdb := k.PodDisruptionBudget; pdb != nil {
		out = append(out, child{"PodDisruptionBudget", pdb, func(a map[string]string) { pdb.WithAnnotations(a) }, &policyv1.PodDisruptionBudget{}, extractor(policyv1ac.ExtractPodDisruptionBudget)})
	}
	return out
}

// restoredChild is a child that somebody other than the operator had changed, and that the
// operator put back to its rendering.
type restoredChild struct {
	Kind, Name string
	// Object is the child as it was found (the Event's related object).
	Object client.Object
	// By names the field managers whose fields were found, or says that fields the operator
	// applied were changed or removed.
	By string
}

// applyAll server-side applies (with force) every child whose live content differs from its
// rendering, so a converged gateway costs no writes and an edited child is put back. The
// content compared is what the operator's field manager applied (client-go's Extract) against
// the rendering, plus any field another manager owns: a field only somebody else set (a
// container, a volume, a label) would survive an apply, so the operator first takes those
// fields over (managedFields) and the apply then drops them. The children found edited while
// the rendering had not changed are returned, for an Event and a metric. A child the cache
// shows drifted is read again from the API server (live) before anything is done: the cache
// may not have seen the operator's own last apply yet.
func applyAll(ctx context.Context, c client.Client, live client.Reader, namespace string, k *children.Children) ([]restoredChild, error) {
	var restored []restoredChild
	for _, ch := range childrenOf(k) {
		name := *ch.ac.GetName()
		raw, err := json.Marshal(ch.ac)
		if err != nil {
			return restored, fmt.Errorf("encoding %s %s: %w", ch.kind, name, err)
		}
		sum := sha256.Sum256(raw)
		hash := hex.EncodeToString(sum[:16])
		ch.annotate(map[string]string{AnnotationAppliedHash: hash})
		err = c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, ch.existing)
		if err != nil && !apierrors.IsNotFound(err) {
			return restored, fmt.Errorf("reading %s %s: %w", ch.kind, name, err)
		}
		if err == nil {
			d, err := childDrift(ch, ch.existing)
			if err != nil {
				return restored, fmt.Errorf("comparing %s %s with its rendering: %w", ch.kind, name, err)
			}
			if d.drifted() && live != nil {
				if err := live.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, ch.existing); err != nil && !apierrors.IsNotFound(err) {
					return restored, fmt.Errorf("reading %s %s: %w", ch.kind, name, err)
				} else if err == nil {
					if d, err = childDrift(ch, ch.existing); err != nil {
						return restored, fmt.Errorf("comparing %s %s with its rendering: %w", ch.kind, name, err)
					}
				}
			}
			if !d.drifted() {
				continue
			}
			if len(d.foreign) > 0 {
				if err := adoptForeignFields(ctx, c, ch.existing, d.foreign); err != nil {
					return restored, fmt.Errorf("taking over the fields others set on %s %s: %w", ch.kind, name, err)
				}
			}
			if by := d.tampering(ch.existing.GetAnnotations()[AnnotationAppliedHash] == hash); by != "" {
				restored = append(restored, restoredChild{Kind: ch.kind, Name: name, Object: ch.existing, By: by})
			}
		}
		if err := c.Apply(ctx, ch.ac, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			return restored, fmt.Errorf("applying %s %s: %w", ch.kind, name, err)
		}
	}
	return restored, nil
}

// drift is how a live child differs from its rendering.
type drift struct {
	// changed: what the operator's field manager applied is not the rendering (the rendering
	// changed, or somebody changed or removed a field the operator set).
	changed bool
	// foreign are the managedFields entries of other managers that own fields of the object
	// (other than the few the cluster itself writes, allowedForeign).
	foreign []metav1.ManagedFieldsEntry
	// foreignPaths name a few of their fields, for the Event.
	foreignPaths []string
}

func (d drift) drifted() bool { return d.changed || len(d.foreign) > 0 }

// tampering says who changed the child when it was not (only) the rendering that changed:
// fields of other managers, or the operator's own fields edited while the applied hash still
// names the rendering. Empty: the rendering changed, nothing else.
func (d drift) tampering(sameRendering bool) string {
	if len(d.foreign) > 0 {
		var managers []string
		for _, e := range d.foreign {
			managers = append(managers, fmt.Sprintf("%s (%s)", e.Manager, e.Operation))
		}
		return fmt.Sprintf("fields set by %s: %s", strings.Join(managers, ", "), strings.Join(d.foreignPaths, ", "))
	}
	if d.changed && sameRendering {
		return "fields the operator applied were changed or removed"
	}
	return ""
}

// allowedForeign are the fields of a child the cluster's own controllers write (the
// Deployment controller's revision annotation); status is written through its subresource.
var allowedForeign = fieldpath.NewSet(
	fieldpath.MakePathOrDie("metadata", "annotations", "deployment.kubernetes.io/revision"),
)

// childDrift compares a live child with its rendering ch.ac (the applied-hash annotation set).
func childDrift(ch child, live client.Object) (drift, error) {
	var d drift
	applied, err := ch.extract(live)
	if err != nil {
		return d, err
	}
	same, err := sameJSON(applied, ch.ac)
	if err != nil {
		return d, err
	}
	d.changed = !same
	for _, e := range live.GetManagedFields() {
		if e.Subresource != "" || (e.Manager == FieldOwner && e.Operation == metav1.ManagedFieldsOperationApply) {
			continue
		}
		owned, err := fieldsOf(e)
		if err != nil {
			return d, err
		}
		extra := owned.Leaves().Difference(allowedForeign)
		if extra.Empty() {
			continue
		}
		d.foreign = append(d.foreign, e)
		extra.Iterate(func(p fieldpath.Path) {
			if len(d.foreignPaths) < 5 {
				d.foreignPaths = append(d.foreignPaths, p.String())
			}
		})
	}
	return d, nil
}

func fieldsOf(e metav1.ManagedFieldsEntry) (*fieldpath.Set, error) {
	s := &fieldpath.Set{}
	if e.FieldsV1 == nil {
		return s, nil
	}
	if err := s.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
		return nil, fmt.Errorf("managed fields of %s: %w", e.Manager, err)
	}
	return s, nil
}

// sameJSON reports whether a and b encode to the same JSON document (field order aside).
func sameJSON(a, b any) (bool, error) {
	var va, vb any
	for _, p := range []struct {
		in  any
		out *any
	}{{a, &va}, {b, &vb}} {
		raw, err := json.Marshal(p.in)
		if err != nil {
			return false, err
		}
		if err := json.Unmarshal(raw, p.out); err != nil {
			return false, err
		}
	}
	return reflect.DeepEqual(va, vb), nil
}

// adoptForeignFields moves the fields of the foreign managedFields entries into the
// operator's apply entry (one patch of metadata.managedFields, guarded by the
// resourceVersion), so the apply that follows, which does not render them, removes them.
func adoptForeignFields(ctx context.Context, c client.Client, live client.Object, foreign []metav1.ManagedFieldsEntry) error {
	var (
		ours    *metav1.ManagedFieldsEntry
		kept    []metav1.ManagedFieldsEntry
		adopted = &fieldpath.Set{}
	)
	isForeign := map[int]bool{}
	for i, e := range live.GetManagedFields() {
		for _, f := range foreign {
			if reflect.DeepEqual(e, f) {
				isForeign[i] = true
			}
		}
	}
	for i, e := range live.GetManagedFields() {
		switch {
		case isForeign[i]:
			s, err := fieldsOf(e)
			if err != nil {
				return err
			}
			adopted = adopted.Union(s)
		case e.Manager == FieldOwner && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == "":
			s, err := fieldsOf(e)
			if err != nil {
				return err
			}
			adopted = adopted.Union(s)
			ours = e.DeepCopy()
		default:
			kept = append(kept, e)
		}
	}
	if ours == nil {
		ours = &metav1.ManagedFieldsEntry{
			Manager:    FieldOwner,
			Operation:  metav1.ManagedFieldsOperationApply,
			APIVersion: foreign[0].APIVersion,
			FieldsType: "FieldsV1",
		}
	}
	raw, err := adopted.ToJSON()
	if err != nil {
		return err
	}
	ours.FieldsV1 = &metav1.FieldsV1{Raw: raw}
	now := metav1.NewTime(time.Now())
	ours.Time = &now
	before := live.DeepCopyObject().(client.Object)
	live.SetManagedFields(append(kept, *ours))
	return c.Patch(ctx, live, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}

// applyStatus server-side applies a status subresource owned by the operator's field manager.
func applyStatus(ctx context.Context, c client.Client, obj client.Object, kind string, status any) error {
	return kube.ApplyStatus(ctx, c, vpnv1.GroupVersion.WithKind(kind), obj.GetNamespace(), obj.GetName(), FieldOwner, status)
}
