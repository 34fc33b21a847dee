package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/loadbalancer"
	"github.com/bnerd/bnerd-vpn-operator/internal/kube"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// standbyGateway is a load-balanced IPsec gateway with a standby.
func standbyGateway(ns, name string) *vpnv1.VPNGateway {
	return gen.VPNGateway(ns, name, gen.LoadBalancer(vpnv1.LoadBalancerEndpoint{}),
		gen.Exposure("api", "192.0.2.10", gen.Port(443)), gen.Standby(true))
}

// gatewayPod is a pod of the gateway as its Deployment would make it (envtest runs no
// controllers and no kubelet: the pod stays Pending, and a deleted pod stays terminating).
func gatewayPod(ns, gateway, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: children.Labels(gateway)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:test"}}},
	}
}

// agentClient acts as the gateway's agent: its ServiceAccount, with the rendered Role.
func agentClient(t *testing.T, ns, gateway string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + children.Name(gateway)}
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// setLease writes the Lease's holder (and, when set, annotations) as an agent would: an Update
// of the object it read.
func setLease(ctx context.Context, c client.Client, ns, name, holder string, annotations map[string]string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l := &coordinationv1.Lease{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, l); err != nil {
			return err
		}
		l.Spec.HolderIdentity = &holder
		now := metav1.NewMicroTime(time.Now())
		l.Spec.RenewTime = &now
		for k, v := range annotations {
			if l.Annotations == nil {
				l.Annotations = map[string]string{}
			}
			l.Annotations[k] = v
		}
		return c.Update(ctx, l)
	})
}

// roles reads the pods' role labels and deletion costs: "name=active/1000", "name=-/-1000".
func roles(ctx context.Context, ns string, names ...string) (string, error) {
	var out []string
	for _, n := range names {
		p := &corev1.Pod{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: n}, p); err != nil {
			return "", err
		}
		role, cost := p.Labels[children.LabelRole], p.Annotations[corev1.PodDeletionCost]
		if role == "" {
			role = "-"
		}
		if cost == "" {
			cost = "-"
		}
		out = append(out, fmt.Sprintf("%s=%s/%s", n, role, cost))
	}
	return fmt.Sprint(out), nil
}

// waitRoles waits until the pods' roles are want (as roles prints them) and returns how long
// that took from start.
func waitRoles(t *testing.T, start time.Time, ns, want string, names ...string) time.Duration {
	t.Helper()
	var last string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		got, err := roles(context.Background(), ns, names...)
		if err == nil && got == want {
			return time.Since(start)
		}
		last = fmt.Sprint(got, err)
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("pod roles %s, want %s", last, want)
	return 0
}

// TestStandby runs a gateway with a standby against a real API server: what is rendered for
// it, the agents electing through the Lease with the Role they are given, the operator moving
// the active label (and only to the gateway's own pods), the status, and the standby turned off.
func TestStandby(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ctx := context.Background()
	ns := namespace(t)
	gw := standbyGateway(ns, "acme")
	create(t, gw, standbyGateway(ns, "other"))
	leaseName := children.ActiveLeaseNameFor("", "acme")

	t.Run("rendered", func(t *testing.T) {
		eventually(t, 30*time.Second, func() error {
			d := &appsv1.Deployment{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.Name("acme")}, d); err != nil {
				return err
			}
			s := d.Spec
			if s.Replicas == nil || *s.Replicas != 2 || s.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType ||
				s.Strategy.RollingUpdate.MaxSurge.String() != "0" || s.Strategy.RollingUpdate.MaxUnavailable.String() != "1" {
				return fmt.Errorf("deployment replicas %v strategy %+v", s.Replicas, s.Strategy)
			}
			aa := s.Template.Spec.Affinity
			if aa == nil || aa.PodAntiAffinity == nil || len(aa.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 ||
				aa.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey != corev1.LabelHostname {
				return fmt.Errorf("pod anti-affinity %+v", aa)
			}
			return nil
		})
		eventually(t, 30*time.Second, func() error {
			l := &coordinationv1.Lease{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: leaseName}, l); err != nil {
				return err
			}
			if ref := metav1.GetControllerOf(l); ref == nil || ref.Kind != "VPNGateway" || ref.Name != "acme" ||
				l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != children.LeaseDurationSeconds ||
				l.Spec.HolderIdentity != nil || l.Labels[children.LabelGateway] != "acme" {
				return fmt.Errorf("lease %+v", l)
			}
			pdb := &policyv1.PodDisruptionBudget{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.Name("acme")}, pdb); err != nil {
				return err
			}
			if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.String() != "1" || pdb.Spec.Selector.MatchLabels[children.LabelGateway] != "acme" {
				return fmt.Errorf("pod disruption budget %+v", pdb.Spec)
			}
			role := &rbacv1.Role{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.Name("acme")}, role); err != nil {
				return err
			}
			if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
				return slices.Equal(r.Resources, []string{"leases"}) && slices.Equal(r.ResourceNames, []string{leaseName})
			}) {
				return fmt.Errorf("role rules %+v lack the Lease", role.Rules)
			}
			svc := &corev1.Service{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: loadbalancer.ServiceName("acme")}, svc); err != nil {
				return err
			}
			if svc.Spec.Selector[children.LabelRole] != children.RoleActive || svc.Spec.Selector[children.LabelGateway] != "acme" {
				return fmt.Errorf("service selector %v", svc.Spec.Selector)
			}
			return nil
		})
	})

	agent := agentClient(t, ns, "acme")
	t.Run("agent-permissions", func(t *testing.T) {
		// its own Lease: read (also as a watch would list it, by name), write
		eventually(t, 30*time.Second, func() error { return setLease(ctx, agent, ns, leaseName, "", nil) })
		var list coordinationv1.LeaseList
		if err := agent.List(ctx, &list, client.InNamespace(ns), client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", leaseName)}); err != nil || len(list.Items) != 1 {
			t.Errorf("listing its Lease by name: %d, %v", len(list.Items), err)
		}
		// not another gateway's, not every Lease, and it creates none
		eventually(t, 30*time.Second, func() error {
			return env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.ActiveLeaseNameFor("", "other")}, &coordinationv1.Lease{})
		})
		if err := setLease(ctx, agent, ns, children.ActiveLeaseNameFor("", "other"), "x", nil); !apierrors.IsForbidden(err) {
			t.Errorf("writing another gateway's Lease: %v, want Forbidden", err)
		}
		if err := agent.List(ctx, &coordinationv1.LeaseList{}, client.InNamespace(ns)); !apierrors.IsForbidden(err) {
			t.Errorf("listing every Lease: %v, want Forbidden", err)
		}
		extra := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "acme-gateway-active2"}}
		if err := agent.Create(ctx, extra); !apierrors.IsForbidden(err) {
			t.Errorf("creating a Lease: %v, want Forbidden", err)
		}
		// nor the pods' labels
		if err := agent.Patch(ctx, gatewayPod(ns, "acme", "acme-a"), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"vpn.bnerd.net/role":"active"}}}`))); !apierrors.IsForbidden(err) {
			t.Errorf("labelling a pod: %v, want Forbidden", err)
		}
	})

	// other-a is a pod of another gateway with a standby (no holder: a standby too)
	create(t, gatewayPod(ns, "acme", "acme-a"), gatewayPod(ns, "acme", "acme-b"), gatewayPod(ns, "other", "other-a"))
	pods := []string{"acme-a", "acme-b", "other-a"}

	t.Run("label-follows-holder", func(t *testing.T) {
		// no holder yet: both are standbys
		waitRoles(t, time.Now(), ns, "[acme-a=-/-1000 acme-b=-/-1000 other-a=-/-1000]", pods...)
		for _, step := range []struct{ holder, want string }{
			{"acme-a", "[acme-a=active/1000 acme-b=-/-1000 other-a=-/-1000]"},
			{"acme-b", "[acme-a=-/-1000 acme-b=active/1000 other-a=-/-1000]"},
			{"acme-a", "[acme-a=active/1000 acme-b=-/-1000 other-a=-/-1000]"},
		} {
			start := time.Now()
			if err := setLease(ctx, agent, ns, leaseName, step.holder, nil); err != nil {
				t.Fatal(err)
			}
			took := waitRoles(t, start, ns, step.want, pods...)
			t.Logf("holder %s: the pods' labels followed within %s", step.holder, took)
			if took > time.Second {
				t.Errorf("the label took %s to follow the Lease", took)
			}
		}
	})

	t.Run("hostile-holder", func(t *testing.T) {
		// A hostile agent names a pod of another gateway, or no pod at all: no pod is active,
		// and the other gateway's pod is never labelled.
		for _, holder := range []string{"other-a", "acme-gone", "../acme-a", ""} {
			if err := setLease(ctx, agent, ns, leaseName, "acme-a", nil); err != nil {
				t.Fatal(err)
			}
			waitRoles(t, time.Now(), ns, "[acme-a=active/1000 acme-b=-/-1000 other-a=-/-1000]", pods...)
			if err := setLease(ctx, agent, ns, leaseName, holder, nil); err != nil {
				t.Fatal(err)
			}
			waitRoles(t, time.Now(), ns, "[acme-a=-/-1000 acme-b=-/-1000 other-a=-/-1000]", pods...)
		}
	})

	t.Run("status", func(t *testing.T) {
		takeover := `{"time":"2026-12-07T18:00:00.123456789Z","from":"acme-a","to":"acme-b","reason":"ActiveGone","outageMillis":812}`
		if err := setLease(ctx, agent, ns, leaseName, "acme-b", map[string]string{children.AnnotationLastTakeover: takeover}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, func() error {
			g := &vpnv1.VPNGateway{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(gw), g); err != nil {
				return err
			}
			a := g.Status.Availability
			if a == nil || a.ActivePod != "acme-b" || !slices.Equal(a.StandbyPods, []string{"acme-a"}) || a.LastTakeover == nil ||
				a.LastTakeover.From != "acme-a" || a.LastTakeover.To != "acme-b" || a.LastTakeover.Reason != vpnv1.TakeoverActiveGone ||
				a.LastTakeover.OutageMillis != 812 || !a.LastTakeover.Time.Equal(&metav1.MicroTime{Time: time.Date(2026, 12, 7, 18, 0, 0, 123456000, time.UTC)}) {
				return fmt.Errorf("status.availability %+v (last takeover %+v)", a, a.LastTakeover)
			}
			if got := gatewaySeries(t, "bnerd_vpn_gateway_standbys_ready", "", ns, "acme"); len(got) != 1 || got[""] != 1 {
				return fmt.Errorf("bnerd_vpn_gateway_standbys_ready %v, want 1", got)
			}
			return nil
		})
		// garbage from the agent is left out
		if err := setLease(ctx, agent, ns, leaseName, "acme-b", map[string]string{children.AnnotationLastTakeover: `{"time":"yesterday","to":"<script>"}`}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, func() error {
			g := &vpnv1.VPNGateway{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(gw), g); err != nil {
				return err
			}
			if a := g.Status.Availability; a == nil || a.ActivePod != "acme-b" || a.LastTakeover != nil {
				return fmt.Errorf("status.availability %+v", a)
			}
			return nil
		})
	})

	t.Run("handover-by-a-terminating-active", func(t *testing.T) {
		waitRoles(t, time.Now(), ns, "[acme-a=-/-1000 acme-b=active/1000 other-a=-/-1000]", pods...)
		// The active pod is stopped (a rollout): terminating, it stays active until it has
		// handed the Lease over. (An unscheduled pod is deleted at once: a finalizer keeps it
		// terminating.)
		b := gatewayPod(ns, "acme", "acme-b")
		keep := []byte(`{"metadata":{"finalizers":["vpn.bnerd.net/test-keep"]}}`)
		if err := env.Client.Patch(ctx, b, client.RawPatch(types.MergePatchType, keep)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.Client.Patch(ctx, b, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		})
		if err := env.Client.Delete(ctx, b); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		waitRoles(t, time.Now(), ns, "[acme-a=-/-1000 acme-b=active/1000 other-a=-/-1000]", pods...)
		if err := setLease(ctx, agent, ns, leaseName, "acme-a", nil); err != nil {
			t.Fatal(err)
		}
		waitRoles(t, time.Now(), ns, "[acme-a=active/1000 acme-b=-/1000 other-a=-/-1000]", pods...)
	})

	t.Run("lease-metadata-restored-spec-kept", func(t *testing.T) {
		// An agent strips the Lease's labels: the operator puts them back and leaves the
		// holder the agents wrote.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			l := &coordinationv1.Lease{}
			if err := agent.Get(ctx, types.NamespacedName{Namespace: ns, Name: leaseName}, l); err != nil {
				return err
			}
			l.Labels = nil
			return agent.Update(ctx, l)
		}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, func() error {
			l := &coordinationv1.Lease{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: leaseName}, l); err != nil {
				return err
			}
			if l.Labels[children.LabelGateway] != "acme" || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "acme-a" ||
				l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != children.LeaseDurationSeconds {
				return fmt.Errorf("lease labels %v holder %q duration %v", l.Labels, ptrDeref(l.Spec.HolderIdentity), l.Spec.LeaseDurationSeconds)
			}
			return nil
		})
	})

	t.Run("standby-turned-off", func(t *testing.T) {
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			g := &vpnv1.VPNGateway{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(gw), g); err != nil {
				return err
			}
			g.Spec.Availability.Standby = ptrTo(false)
			return env.Client.Update(ctx, g)
		}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, func() error {
			for _, o := range []client.Object{
				&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: leaseName}},
				&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: children.Name("acme")}},
			} {
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
					return fmt.Errorf("%T %s still there (%v)", o, o.GetName(), err)
				}
			}
			d := &appsv1.Deployment{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.Name("acme")}, d); err != nil {
				return err
			}
			if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || d.Spec.Template.Spec.Affinity != nil {
				return fmt.Errorf("deployment replicas %d strategy %s", *d.Spec.Replicas, d.Spec.Strategy.Type)
			}
			svc := &corev1.Service{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: loadbalancer.ServiceName("acme")}, svc); err != nil {
				return err
			}
			if _, ok := svc.Spec.Selector[children.LabelRole]; ok {
				return fmt.Errorf("service selector %v", svc.Spec.Selector)
			}
			g := &vpnv1.VPNGateway{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(gw), g); err != nil {
				return err
			}
			if g.Status.Availability != nil {
				return fmt.Errorf("status.availability %+v without a standby", g.Status.Availability)
			}
			if got := gatewaySeries(t, "bnerd_vpn_gateway_standbys_ready", "", ns, "acme"); len(got) != 0 {
				return fmt.Errorf("bnerd_vpn_gateway_standbys_ready %v without a standby", got)
			}
			return nil
		})
	})
}

func ptrDeref[T any](p *T) (v T) {
	if p != nil {
		v = *p
	}
	return v
}

// TestStandbyHostNetwork: a host-network IPsec gateway with a standby on two nodes renders two
// pods on the host network, pinned to those nodes (node affinity beside the anti-affinity),
// each agent told the VIP (--vip, which it checks the model against and holds while active)
// and its Lease; the public address is the VIP. An older host-network gateway on one of the
// nodes blocks it (Conflict naming that node).
func TestStandbyHostNetwork(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ctx := context.Background()
	ns := namespace(t)
	nodes := []string{"hn-standby-1-" + ns, "hn-standby-2-" + ns}
	for _, n := range nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if err := env.Client.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
	}
	gw := gen.VPNGateway(ns, "acme", gen.Exposure("api", "192.0.2.10", gen.Port(443)), gen.Standby(true))
	gw.Spec.Endpoint = vpnv1.Endpoint{HostNetwork: &vpnv1.HostNetworkEndpoint{Nodes: nodes, Address: "198.51.100.10"}}
	create(t, gw)
	waitCondition(t, gw, vpnv1.ConditionEndpointReady, metav1.ConditionTrue, "Ready")
	eventually(t, 30*time.Second, func() error {
		d := &appsv1.Deployment{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.Name("acme")}, d); err != nil {
			got := &vpnv1.VPNGateway{}
			_ = env.Client.Get(ctx, client.ObjectKeyFromObject(gw), got)
			return fmt.Errorf("%w (conditions %+v)", err, got.Status.Conditions)
		}
		s, pod := d.Spec, d.Spec.Template.Spec
		if s.Replicas == nil || *s.Replicas != 2 || !pod.HostNetwork {
			return fmt.Errorf("replicas %v, hostNetwork %v", s.Replicas, pod.HostNetwork)
		}
		aff := pod.Affinity
		if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
			return fmt.Errorf("no required pod anti-affinity: %+v", aff)
		}
		if aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
			return fmt.Errorf("no node affinity: %+v", aff)
		}
		terms := aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		var pinned []string
		for _, term := range terms {
			for _, f := range term.MatchFields {
				pinned = append(pinned, f.Values...)
			}
		}
		if len(terms) != len(nodes) || !slices.Equal(pinned, nodes) {
			return fmt.Errorf("node affinity %+v, want one term per node of %v", terms, nodes)
		}
		for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
			if c.Name != children.ContainerAgent && c.Name != children.ContainerAgentInit {
				continue
			}
			if i := slices.Index(c.Args, "--vip"); i < 0 || i+1 >= len(c.Args) || c.Args[i+1] != "198.51.100.10" {
				return fmt.Errorf("container %s args %q: no --vip 198.51.100.10", c.Name, c.Args)
			}
			if c.Name == children.ContainerAgent && !slices.Contains(c.Args, "--standby-lease="+children.ActiveLeaseNameFor("", "acme")) {
				return fmt.Errorf("agent args %q: no --standby-lease", c.Args)
			}
		}
		return env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.ActiveLeaseNameFor("", "acme")}, &coordinationv1.Lease{})
	})
	eventually(t, 10*time.Second, func() error {
		got := &vpnv1.VPNGateway{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(gw), got); err != nil {
			return err
		}
		if got.Status.PublicAddress != "198.51.100.10" {
			return fmt.Errorf("publicAddress %q, want the VIP", got.Status.PublicAddress)
		}
		return nil
	})

	// A younger single-node gateway on one of the nodes conflicts with it.
	younger := gen.VPNGateway(ns, "younger", gen.HostNetwork(nodes[1], "198.51.100.12"), gen.Exposure("api", "192.0.2.10", gen.Port(443)))
	create(t, younger)
	c := waitCondition(t, younger, vpnv1.ConditionEndpointReady, metav1.ConditionFalse, "Conflict")
	if !strings.Contains(c.Message, "acme") || !strings.Contains(c.Message, nodes[1]) {
		t.Errorf("conflict message %q names neither the gateway holding the node nor the node", c.Message)
	}
}
