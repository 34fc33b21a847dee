package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// tampering is one edit of a gateway's child by someone other than the operator (a tenant
// with more rights than the shipped role gives, a careless admin): the operator must put the
// child back to its rendering, whichever way the edit was made.
type tampering struct {
	name string
	// obj is an empty object of the child's kind; childName picks its name from the gateway's.
	obj       func() client.Object
	childName func(gw string) string
	// edit changes the live child (in place; the test writes it with Update, keeping the
	// applied-hash annotation unless edit removes it); or apply, when set, builds a document
	// from the live child that the test applies server-side with force, taking the fields
	// over from the operator.
	edit  func(client.Object)
	apply func(live client.Object) map[string]any
	// manager is the field manager the edit is made as.
	manager string
}

func tamperings() []tampering {
	cm := func() client.Object { return &corev1.ConfigMap{} }
	dep := func() client.Object { return &appsv1.Deployment{} }
	main := func(gw string) string { return children.Name(gw) }
	cfgName := func(gw string) string { return children.ConfigMapName(gw) }
	return []tampering{
		{
			// The attack seen on a live lab: the model rewritten, the hash annotation kept.
			name: "configmap-model-rewritten-hash-kept", obj: cm, childName: cfgName, manager: "kubectl-edit",
			edit: func(o client.Object) {
				c := o.(*corev1.ConfigMap)
				for k := range c.Data {
					c.Data[k] = `{"endpoint":{"kind":"loadBalancer"}}`
				}
			},
		},
		{
			name: "configmap-key-added", obj: cm, childName: cfgName, manager: "kubectl-edit",
			edit: func(o client.Object) { o.(*corev1.ConfigMap).Data["extra.nft"] = "table inet x {}" },
		},
		{
			name: "configmap-hash-annotation-removed-and-data-changed", obj: cm, childName: cfgName, manager: "kubectl-edit",
			edit: func(o client.Object) {
				c := o.(*corev1.ConfigMap)
				delete(c.Annotations, controller.AnnotationAppliedHash)
				for k := range c.Data {
					c.Data[k] = "{}"
				}
			},
		},
		{
			name: "deployment-image-swapped", obj: dep, childName: main, manager: "kubectl-set",
			edit: func(o client.Object) {
				d := o.(*appsv1.Deployment)
				d.Spec.Template.Spec.Containers[0].Image = "evil:latest"
			},
		},
		{
			name: "deployment-container-added", obj: dep, childName: main, manager: "kubectl-patch",
			edit: func(o client.Object) {
				d := o.(*appsv1.Deployment)
				d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{
					Name: "shell", Image: "busybox", SecurityContext: &corev1.SecurityContext{Privileged: ptrTo(true)},
				})
			},
		},
		{
			name: "deployment-privileged-by-server-side-apply", obj: dep, childName: main, manager: "tenant-apply",
			apply: func(o client.Object) map[string]any {
				d := o.(*appsv1.Deployment)
				return map[string]any{
					"apiVersion": "apps/v1", "kind": "Deployment",
					"metadata": map[string]any{"name": d.Name, "namespace": d.Namespace},
					"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
						"containers": []any{map[string]any{
							"name": d.Spec.Template.Spec.Containers[0].Name,
							"securityContext": map[string]any{
								"privileged": true, "allowPrivilegeEscalation": true,
								"capabilities": map[string]any{"add": []any{"SYS_ADMIN"}},
							},
						}},
					}}},
				}
			},
		},
		{
			name: "role-widened", obj: func() client.Object { return &rbacv1.Role{} }, childName: main, manager: "kubectl-edit",
			edit: func(o client.Object) {
				r := o.(*rbacv1.Role)
				r.Rules = append(r.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list"}})
			},
		},
		{
			name: "networkpolicy-opened", obj: func() client.Object { return &networkingv1.NetworkPolicy{} }, childName: main, manager: "kubectl-edit",
			edit: func(o client.Object) {
				p := o.(*networkingv1.NetworkPolicy)
				p.Spec.Ingress = append(p.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{})
			},
		},
	}
}

// restoredCount reads bnerd_vpn_children_restored_total for one gateway: kind -> count.
func restoredCount(t *testing.T, ns, gw string) map[string]float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "bnerd_vpn_children_restored_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["namespace"] == ns && l["gateway"] == gw {
				out[l["kind"]] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// restorable is what of a child must come back exactly: its spec-like content and its
// annotations, not the fields the API server keeps.
func restorable(o client.Object) string {
	var v any
	switch x := o.(type) {
	case *corev1.ConfigMap:
		v = []any{x.Data, x.BinaryData, x.Annotations, x.Labels}
	case *appsv1.Deployment:
		v = []any{x.Spec, x.Annotations[controller.AnnotationAppliedHash], x.Labels}
	case *rbacv1.Role:
		v = []any{x.Rules, x.Annotations, x.Labels}
	case *networkingv1.NetworkPolicy:
		v = []any{x.Spec, x.Annotations, x.Labels}
	default:
		panic(fmt.Sprintf("comparable: %T", o))
	}
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(raw)
}

// A gateway's children edited by anyone but the operator are put back to their rendering —
// content compared, not a hash annotation — with a Warning event and a metric, and an
// untouched gateway's children are never rewritten.
func TestTamperedChildrenAreRestored(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ns := namespace(t)
	ctx := context.Background()
	gw := ipsecGateway(ns, "gw")
	create(t, gw, pskSecret(ns, "p"), gen.VPNPeer(ns, "p", gen.RemoteSubnets("10.20.0.0/16")))
	waitCondition(t, gw, vpnv1.ConditionRendered, metav1.ConditionTrue, controller.ReasonApplied)
	// The reverse exposure's Service address comes in a later pass: the children are
	// converged, and what a case compares with, once the model carries it.
	eventually(t, 20*time.Second, func() error {
		m, err := renderedModel(ctx, ns, "gw")
		if err != nil {
			return err
		}
		for _, r := range m.ReverseExposures {
			if !r.ServiceIP.IsValid() {
				return fmt.Errorf("reverse exposure %s has no Service address yet", r.Name)
			}
		}
		return nil
	})

	cases := tamperings()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := types.NamespacedName{Namespace: ns, Name: c.childName("gw")}
			rendered := c.obj()
			eventually(t, 20*time.Second, func() error { return env.Client.Get(ctx, key, rendered) })
			want := restorable(rendered)
			before := restoredCount(t, ns, "gw")

			switch {
			case c.apply != nil:
				raw, _ := json.Marshal(c.apply(rendered))
				if err := env.Client.Patch(ctx, rendered.DeepCopyObject().(client.Object), client.RawPatch(types.ApplyPatchType, raw),
					client.FieldOwner(c.manager), client.ForceOwnership); err != nil {
					t.Fatalf("tampering: %v", err)
				}
			default:
				err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
					live := c.obj()
					if err := env.Client.Get(ctx, key, live); err != nil {
						return err
					}
					c.edit(live)
					return env.Client.Update(ctx, live, client.FieldOwner(c.manager))
				})
				if err != nil {
					t.Fatalf("tampering: %v", err)
				}
			}

			eventually(t, 20*time.Second, func() error {
				live := c.obj()
				if err := env.Client.Get(ctx, key, live); err != nil {
					return err
				}
				if got := restorable(live); got != want {
					return fmt.Errorf("%s not restored:\n got %s\nwant %s", key.Name, got, want)
				}
				for _, e := range live.GetManagedFields() {
					if e.Manager == c.manager {
						return fmt.Errorf("%s still has fields of %s", key.Name, c.manager)
					}
				}
				return nil
			})
			kind := reflect.TypeOf(rendered).Elem().Name()
			eventually(t, 20*time.Second, func() error {
				after := restoredCount(t, ns, "gw")
				if after[kind] != before[kind]+1 {
					return fmt.Errorf("restored %s: %v before, %v after, want one more", kind, before, after)
				}
				return nil
			})
			eventually(t, 20*time.Second, func() error {
				var events eventsv1.EventList
				if err := env.Client.List(ctx, &events, client.InNamespace(ns)); err != nil {
					return err
				}
				for _, e := range events.Items {
					if e.Reason == controller.ReasonChildRestored && e.Regarding.Name == "gw" &&
						containsAll(e.Note, kind, key.Name) && e.Related != nil && e.Related.Kind == kind && e.Related.Name == key.Name {
						return nil
					}
				}
				return fmt.Errorf("no %s event for %s %s", controller.ReasonChildRestored, kind, key.Name)
			})
		})
	}

	// A pass over a converged gateway writes nothing: a spec change that the children do not
	// render (a label on the gateway is not rendered) reconciles, and every child keeps its
	// resourceVersion while the restored counts stay where the tamperings left them.
	t.Run("converged-children-are-not-rewritten", func(t *testing.T) {
		versions := map[string]string{}
		for _, c := range cases {
			o := c.obj()
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: c.childName("gw")}, o); err != nil {
				t.Fatal(err)
			}
			versions[fmt.Sprintf("%T", o)] = o.GetResourceVersion()
		}
		counts := restoredCount(t, ns, "gw")
		// Renaming the peer's remote ID re-renders the ConfigMap only; wait for it, then
		// check nothing else moved and no restore was counted.
		p := &vpnv1.VPNPeer{}
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "p"}, p); err != nil {
				return err
			}
			p.Spec.IPsec.Peer.ID = "renamed.example.com"
			return env.Client.Update(ctx, p)
		}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 20*time.Second, func() error {
			cur := &vpnv1.VPNGateway{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(gw), cur); err != nil {
				return err
			}
			cm := &corev1.ConfigMap{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.ConfigMapName("gw")}, cm); err != nil {
				return err
			}
			if cm.ResourceVersion == versions["*v1.ConfigMap"] {
				return fmt.Errorf("the ConfigMap has not been re-rendered yet")
			}
			return nil
		})
		for _, c := range cases {
			o := c.obj()
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: c.childName("gw")}, o); err != nil {
				t.Fatal(err)
			}
			if _, isCM := o.(*corev1.ConfigMap); isCM {
				continue
			}
			if o.GetResourceVersion() != versions[fmt.Sprintf("%T", o)] {
				t.Errorf("%T %s rewritten by a pass that does not change it", o, o.GetName())
			}
		}
		if got := restoredCount(t, ns, "gw"); !reflect.DeepEqual(got, counts) {
			t.Errorf("restores counted on a re-render: %v, were %v", got, counts)
		}
	})
}
