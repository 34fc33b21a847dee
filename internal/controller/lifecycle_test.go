package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testenv"
)

// Each child exists with a controller owner reference to its gateway and comes back when deleted.
func TestChildrenOwnedAndRecreated(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ctx := context.Background()
	ns := namespace(t)
	gw := ipsecGateway(ns, "gw")
	create(t, gw, pskSecret(ns, "a"), gen.VPNPeer(ns, "a", gen.RemoteSubnets("10.20.0.0/16")))
	waitCondition(t, gw, vpnv1.ConditionRendered, metav1.ConditionTrue, controller.ReasonApplied)

	kids := map[string]client.Object{
		children.Name("gw"):          &appsv1.Deployment{},
		children.ConfigMapName("gw"): &corev1.ConfigMap{},
	}
	others := []client.Object{&corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &networkingv1.NetworkPolicy{}}
	all := []struct {
		name string
		obj  client.Object
	}{{children.Name("gw"), kids[children.Name("gw")]}, {children.ConfigMapName("gw"), kids[children.ConfigMapName("gw")]}}
	for _, o := range others {
		all = append(all, struct {
			name string
			obj  client.Object
		}{children.Name("gw"), o})
	}
	for _, k := range all {
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: k.name}, k.obj); err != nil {
			t.Fatalf("%T %s: %v", k.obj, k.name, err)
		}
		refs := k.obj.GetOwnerReferences()
		if len(refs) != 1 || refs[0].UID != gw.UID || refs[0].Controller == nil || !*refs[0].Controller {
			t.Errorf("%T %s: owner references %+v, want one controller reference to gateway %s", k.obj, k.name, refs, gw.UID)
		}
	}
	// Deleted children come back.
	for _, k := range all {
		uid := k.obj.GetUID()
		if err := env.Client.Delete(ctx, k.obj); err != nil {
			t.Fatal(err)
		}
		eventually(t, 20*time.Second, func() error {
			fresh := k.obj.DeepCopyObject().(client.Object)
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: k.name}, fresh); err != nil {
				return err
			}
			if fresh.GetUID() == uid {
				return fmt.Errorf("%T %s not yet replaced", fresh, k.name)
			}
			return nil
		})
	}
}

// 200 gateways created at the same instant get 200 distinct /24s; restarting the operator
// mid-way changes none of them; deleting them frees the blocks for the next 200.
func TestConcurrentAllocationRestartAndReuse(t *testing.T) {
	cfg := operatorConfig()
	cfg.Model.PoolCIDR = netip.MustParsePrefix("100.65.0.0/16") // 256 blocks: 400 gateways only fit with reuse
	stop := startOperator(t, cfg, nil)
	ctx := context.Background()
	ns := namespace(t)
	const n = 200

	createGateways := func(prefix string) {
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				gw := ipsecGateway(ns, fmt.Sprintf("%s-%03d", prefix, i))
				gw.Spec.ReverseExposures = nil
				errs <- env.Client.Create(ctx, gw)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	assigned := func(prefix string) map[string]string {
		var list vpnv1.VPNGatewayList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, gw := range list.Items {
			if gw.Status.ServiceCIDR != "" && len(gw.Name) > len(prefix) && gw.Name[:len(prefix)] == prefix {
				out[gw.Name] = gw.Status.ServiceCIDR
			}
		}
		return out
	}

	createGateways("first")
	var before map[string]string
	eventually(t, 60*time.Second, func() error {
		if before = assigned("first"); len(before) < n/4 {
			return fmt.Errorf("%d of %d gateways allocated", len(before), n)
		}
		return nil
	})
	stop()
	before = assigned("first") // what was written before the operator stopped
	t.Logf("operator stopped with %d of %d gateways allocated", len(before), n)
	startOperator(t, cfg, nil)

	var after map[string]string
	eventually(t, 90*time.Second, func() error {
		if after = assigned("first"); len(after) < n {
			return fmt.Errorf("%d of %d gateways allocated", len(after), n)
		}
		return nil
	})
	for name, cidr := range before {
		if after[name] != cidr {
			t.Errorf("gateway %s changed service CIDR across the restart: %s -> %s", name, cidr, after[name])
		}
	}
	assertDistinctInPool(t, after, cfg.Model.PoolCIDR)

	// Delete them all: their blocks are free again for 200 new gateways.
	if err := env.Client.DeleteAllOf(ctx, &vpnv1.VPNGateway{}, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, func() error {
		var list vpnv1.VPNGatewayList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d gateways not yet deleted", len(list.Items))
		}
		return nil
	})
	createGateways("second")
	eventually(t, 90*time.Second, func() error {
		if got := assigned("second"); len(got) < n {
			return fmt.Errorf("%d of %d new gateways allocated", len(got), n)
		}
		return nil
	})
	assertDistinctInPool(t, assigned("second"), cfg.Model.PoolCIDR)
}

func assertDistinctInPool(t *testing.T, cidrs map[string]string, pool netip.Prefix) {
	t.Helper()
	seen := map[string]string{}
	for name, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil || p.Bits() != 24 || !pool.Contains(p.Addr()) {
			t.Errorf("gateway %s: service CIDR %q is not a /24 in %s", name, c, pool)
		}
		if other, dup := seen[c]; dup {
			t.Errorf("gateways %s and %s share service CIDR %s", name, other, c)
		}
		seen[c] = name
	}
}

// A gateway that finds the pool exhausted says so, and gets a block as soon as one is freed.
func TestPoolExhaustedThenFreed(t *testing.T) {
	cfg := operatorConfig()
	cfg.Model.PoolCIDR = netip.MustParsePrefix("100.66.0.0/23") // two /24s
	startOperator(t, cfg, nil)
	ctx := context.Background()
	ns := namespace(t)
	a, b, c := ipsecGateway(ns, "a"), ipsecGateway(ns, "b"), ipsecGateway(ns, "c")
	create(t, a, b)
	waitCondition(t, a, vpnv1.ConditionAddressesAllocated, metav1.ConditionTrue, controller.ReasonAllocated)
	waitCondition(t, b, vpnv1.ConditionAddressesAllocated, metav1.ConditionTrue, controller.ReasonAllocated)
	create(t, c)
	waitCondition(t, c, vpnv1.ConditionAddressesAllocated, metav1.ConditionFalse, controller.ReasonPoolExhausted)
	waitCondition(t, c, vpnv1.ConditionReady, metav1.ConditionFalse, controller.ReasonPoolExhausted)
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(a), a); err != nil {
		t.Fatal(err)
	}
	freed := a.Status.ServiceCIDR
	if err := env.Client.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	// The retry safety net is minutes away: this only passes if the release wakes c.
	waitCondition(t, c, vpnv1.ConditionAddressesAllocated, metav1.ConditionTrue, controller.ReasonAllocated)
	if c.Status.ServiceCIDR != freed {
		t.Errorf("gateway c got %s, want the freed %s", c.Status.ServiceCIDR, freed)
	}
}

// Once converged, the operator makes no API writes at all (counted, not assumed), and a
// restarted operator re-creates nothing.
func TestNoWritesAfterConvergence(t *testing.T) {
	if testing.Short() {
		t.Skip("observes 30 s of silence")
	}
	var writes testenv.WriteCounter
	stop := startOperator(t, operatorConfig(), writes.Wrap(env.Config))
	ns := namespace(t)
	gw := ipsecGateway(ns, "gw")
	objs := []client.Object{gw}
	for _, name := range []string{"a", "b", "c"} {
		objs = append(objs, pskSecret(ns, name), gen.VPNPeer(ns, name, gen.RemoteSubnets("10.20."+fmt.Sprint(len(objs))+".0/24"), gen.Grants("api")))
	}
	create(t, objs...)
	waitCondition(t, gw, vpnv1.ConditionRendered, metav1.ConditionTrue, controller.ReasonApplied)
	for _, o := range objs[1:] {
		if p, ok := o.(*vpnv1.VPNPeer); ok {
			waitCondition(t, p, vpnv1.ConditionAuthorized, metav1.ConditionTrue, "Authorized")
		}
	}
	settle(t, &writes)
	base := writes.Count()
	time.Sleep(30 * time.Second) // the observation window itself, not a synchronisation
	if d := writes.Count() - base; d != 0 {
		t.Errorf("operator made %d API writes in 30 s after convergence, want 0", d)
	}

	// A restarted operator finds everything converged and writes nothing either.
	stop()
	var restarted testenv.WriteCounter
	startOperator(t, operatorConfig(), restarted.Wrap(env.Config))
	settle(t, &restarted)
	if d := restarted.Count(); d != 0 {
		t.Errorf("restarted operator made %d API writes on converged objects, want 0", d)
	}
}

// settle waits until the write count has not moved for 3 s.
func settle(t *testing.T, w *testenv.WriteCounter) {
	t.Helper()
	last, since := w.Count(), time.Now()
	eventually(t, 60*time.Second, func() error {
		if c := w.Count(); c != last {
			last, since = c, time.Now()
		}
		if time.Since(since) < 3*time.Second {
			return fmt.Errorf("still writing (%d writes so far)", last)
		}
		return nil
	})
}
