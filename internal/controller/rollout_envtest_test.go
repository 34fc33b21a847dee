package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// agentImage is the image of the Deployment's agent container.
func agentImage(d *appsv1.Deployment) string {
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == children.ContainerAgent {
			return c.Image
		}
	}
	return ""
}

// markRolled writes the Deployment's status as the Deployment controller would once its
// rollout completed (envtest runs no controllers): every replica of the current template
// available.
func markRolled(ctx context.Context, ns, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := &appsv1.Deployment{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, d); err != nil {
			return err
		}
		n := int32(1)
		if d.Spec.Replicas != nil {
			n = *d.Spec.Replicas
		}
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
			},
		}
		return env.Client.Status().Update(ctx, d)
	})
}

// TestGatewayRolloutIsBounded: an operator restarted with a new gateway image (an upgrade)
// moves at most --gateway-rollout-concurrency gateways to it at a time; the others keep the
// image their pods run, say so (RolloutPending) and still get every change that needs no new
// pod; a change that replaces a waiting gateway's pod anyway takes the new image along; and
// the waiting move as soon as the rolling ones complete.
func TestGatewayRolloutIsBounded(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	cfg := operatorConfig()
	cfg.GatewayNamespaces = []string{ns} // only this test's Deployments count
	cfg.RolloutConcurrency = 2
	stop := startOperator(t, cfg, nil)
	names := []string{"a", "b", "c", "d"}
	for _, n := range names {
		mods := []gen.GatewayMod{gen.LoadBalancer(vpnv1.LoadBalancerEndpoint{}), gen.Exposure("api", "192.0.2.10", gen.Port(443))}
		if n == "d" {
			mods = append(mods, gen.Standby(true))
		}
		create(t, gen.VPNGateway(ns, n, mods...))
	}
	deployments := func() (map[string]*appsv1.Deployment, error) {
		out := map[string]*appsv1.Deployment{}
		for _, n := range names {
			d := &appsv1.Deployment{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.Name(n)}, d); err != nil {
				return nil, err
			}
			out[n] = d
		}
		return out, nil
	}
	// byImage lists the gateways whose Deployment runs image.
	byImage := func(ds map[string]*appsv1.Deployment, image string) []string {
		var out []string
		for _, n := range names {
			if agentImage(ds[n]) == image {
				out = append(out, n)
			}
		}
		return out
	}
	// New gateways start with the operator's image at once, however many they are.
	eventually(t, 30*time.Second, func() error {
		ds, err := deployments()
		if err != nil {
			return err
		}
		if got := byImage(ds, "agent:test"); len(got) != 4 {
			return fmt.Errorf("gateways on agent:test: %v", got)
		}
		for _, n := range names {
			if err := markRolled(ctx, ns, children.Name(n)); err != nil {
				return err
			}
		}
		return nil
	})
	stop()

	// The upgrade: the same operator with a new gateway image.
	cfg.Render.AgentImage, cfg.Render.StrongSwanImage = "agent:v2", "strongswan:v2"
	startOperator(t, cfg, nil)
	var moved, waiting []string
	eventually(t, 30*time.Second, func() error {
		ds, err := deployments()
		if err != nil {
			return err
		}
		moved, waiting = byImage(ds, "agent:v2"), byImage(ds, "agent:test")
		if len(moved) != 2 || len(waiting) != 2 {
			return fmt.Errorf("on agent:v2 %v, on agent:test %v", moved, waiting)
		}
		for _, n := range waiting {
			c, err := condition(ctx, &vpnv1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}}, controller.ConditionRolloutPending)
			if err != nil {
				return err
			}
			if c.Status != metav1.ConditionTrue || c.Reason != controller.ReasonConcurrencyLimit || !strings.Contains(c.Message, "keeps agent:test") {
				return fmt.Errorf("%s: RolloutPending %s/%s %q", n, c.Status, c.Reason, c.Message)
			}
		}
		return nil
	})
	// Neither of the waiting moves while the two roll (their Deployments not rolled).
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		ds, err := deployments()
		if err != nil {
			t.Fatal(err)
		}
		if got := byImage(ds, "agent:v2"); len(got) > 2 {
			t.Fatalf("%d gateways on the new image while 2 roll: %v", len(got), got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, n := range moved {
		gw := &vpnv1.VPNGateway{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: n}, gw); err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(gw.Status.Conditions, controller.ConditionRolloutPending); c != nil {
			t.Errorf("%s moved and has RolloutPending %q", n, c.Message)
		}
	}

	for _, n := range waiting {
		waitEvent(t, ns, n, controller.EventRolloutPending)
	}

	// A change that needs no new pod reaches a waiting gateway at once: its configuration.
	first, second := waiting[0], waiting[1]
	updateGateway(t, ns, first, func(gw *vpnv1.VPNGateway) {
		gw.Spec.Exposures = append(gw.Spec.Exposures, gen.VPNGateway(ns, first, gen.Exposure("db", "192.0.2.11", gen.Port(5432))).Spec.Exposures...)
	})
	eventually(t, 20*time.Second, func() error {
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.ConfigMapName(first)}, cm); err != nil {
			return err
		}
		if !strings.Contains(cm.Data[render.KeyModel], `"db"`) {
			return fmt.Errorf("%s's configuration lacks the new exposure", first)
		}
		return nil
	})
	ds, err := deployments()
	if err != nil {
		t.Fatal(err)
	}
	if got := agentImage(ds[first]); got != "agent:test" {
		t.Fatalf("%s changed its configuration only, and moved to %s while 2 roll", first, got)
	}

	// A change that replaces the other waiting gateway's pod anyway takes the new image along.
	updateGateway(t, ns, second, func(gw *vpnv1.VPNGateway) {
		on := gw.Spec.Availability == nil || gw.Spec.Availability.Standby == nil || !*gw.Spec.Availability.Standby
		gw.Spec.Availability = &vpnv1.Availability{Standby: &on}
	})
	eventually(t, 20*time.Second, func() error {
		d := &appsv1.Deployment{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.Name(second)}, d); err != nil {
			return err
		}
		if got := agentImage(d); got != "agent:v2" {
			return fmt.Errorf("%s, whose pod is replaced for its standby, runs %s", second, got)
		}
		return nil
	})

	// The two that rolled first complete: the last waiting gateway moves (woken, not polled).
	for _, n := range moved {
		if err := markRolled(ctx, ns, children.Name(n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := markRolled(ctx, ns, children.Name(second)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	eventually(t, 10*time.Second, func() error {
		ds, err := deployments()
		if err != nil {
			return err
		}
		if got := byImage(ds, "agent:v2"); len(got) != 4 {
			return fmt.Errorf("on agent:v2: %v", got)
		}
		gw := &vpnv1.VPNGateway{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: first}, gw); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(gw.Status.Conditions, controller.ConditionRolloutPending); c != nil {
			return fmt.Errorf("%s moved, RolloutPending still %s %q", first, c.Status, c.Message)
		}
		return nil
	})
	t.Logf("the last gateway moved %s after the first two completed", time.Since(start).Round(time.Millisecond))
	waitEvent(t, ns, first, controller.EventRolloutStarted)
	if slices.Contains(moved, first) {
		t.Fatalf("moved %v includes the waiting %s", moved, first)
	}
}

// updateGateway changes a VPNGateway's spec (retried on conflicts).
func updateGateway(t *testing.T, ns, name string, change func(*vpnv1.VPNGateway)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		gw := &vpnv1.VPNGateway{}
		if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, gw); err != nil {
			return err
		}
		change(gw)
		return env.Client.Update(context.Background(), gw)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitEvent waits for an Event of the reason about the VPNGateway.
func waitEvent(t *testing.T, ns, gateway, reason string) {
	t.Helper()
	eventually(t, 20*time.Second, func() error {
		var list eventsv1.EventList
		if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == reason && e.Regarding.Kind == "VPNGateway" && e.Regarding.Name == gateway {
				return nil
			}
		}
		return fmt.Errorf("no %s event for %s", reason, gateway)
	})
}
