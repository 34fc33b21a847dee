package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/bnerd/bnerd-vpn-operator/internal/kube"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// deployment is a gateway Deployment: "gen/observed replicas:updated/total/available", with
// ",deadline" for a rollout past its progress deadline and ",complete" for one the Deployment
// controller called complete (Progressing NewReplicaSetAvailable).
func deployment(t *testing.T, spec string) *appsv1.Deployment {
	t.Helper()
	var gen, observed int64
	var replicas, updated, total, available int32
	head, cond, _ := strings.Cut(spec, ",")
	if _, err := fmt.Sscanf(head, "%d/%d %d:%d/%d/%d", &gen, &observed, &replicas, &updated, &total, &available); err != nil {
		t.Fatalf("deployment %q: %v", spec, err)
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gw-gateway", Generation: gen,
			Labels: map[string]string{LabelManagedBy: LabelManagedByValue}},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas},
		Status: appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: total, UpdatedReplicas: updated,
			AvailableReplicas: available, ReadyReplicas: available},
	}
	switch cond {
	case "deadline":
		d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: progressDeadlineError}}
	case "complete":
		d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: newReplicaSetReady}}
	case "":
	default:
		t.Fatalf("deployment %q: unknown condition %q", spec, cond)
	}
	return d
}

func TestDeploymentRolling(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want bool
	}{
		{"2/2 1:1/1/1", false},          // rolled: one pod, of the current template, available
		{"3/2 1:1/1/1", true},           // a new template the Deployment controller has not seen
		{"3/3 1:0/1/1", true},           // template changed, the old pod still runs
		{"3/3 1:0/0/0", true},           // Recreate: the old pod stopped, none new yet
		{"3/3 1:1/1/0", true},           // the new pod not available yet
		{"3/3 1:1/2/1", true},           // an old pod still terminating
		{"3/3 2:1/2/1", true},           // standby: one pod replaced, one to go
		{"3/3 2:2/2/1", true},           // standby: the second new pod not available yet
		{"3/3 2:2/2/2", false},          // standby: both replaced
		{"1/1 1:0/0/0", true},           // a new Deployment: no pod yet
		{"3/3 1:1/1/0,deadline", false}, // stalled past its progress deadline: not holding a place
		{"3/3 2:1/2/1,deadline", false}, // standby, stalled
		{"4/3 1:1/1/0,deadline", true},  // a new template after a stalled one
		{"3/3 1:1/1/0,complete", false}, // rolled, its pod unavailable since: unhealthy, not rolling
		{"3/3 2:2/2/1,complete", false}, // standby, one pod lost after its rollout
		{"4/3 1:1/1/1,complete", true},  // a new template the controller has not seen
		{"3/3 1:1/1/1,complete", false}, // rolled
	} {
		if got := deploymentRolling(deployment(t, tc.spec)); got != tc.want {
			t.Errorf("%s: rolling %v, want %v", tc.spec, got, tc.want)
		}
	}
}

func TestDecideRollout(t *testing.T) {
	serving := &appsv1.Deployment{Status: appsv1.DeploymentStatus{AvailableReplicas: 1}}
	down := &appsv1.Deployment{}
	for _, tc := range []struct {
		name   string
		in     rolloutInput
		move   bool
		reason string
	}{
		{"new-gateway", rolloutInput{Concurrency: 2, Rolling: 9, ImagesChange: true}, true, rolloutNoDeployment},
		{"images-current", rolloutInput{Live: serving, Concurrency: 2, Rolling: 9}, true, rolloutImagesCurrent},
		{"unbounded", rolloutInput{Live: serving, ImagesChange: true, Rolling: 9}, true, rolloutUnbounded},
		{"pod-replaced-anyway", rolloutInput{Live: serving, ImagesChange: true, PodChangesAnyway: true, Concurrency: 2, Rolling: 9}, true, rolloutPodReplaced},
		{"not-serving", rolloutInput{Live: down, ImagesChange: true, Concurrency: 2, Rolling: 9}, true, rolloutNotServing},
		{"granted-earlier", rolloutInput{Live: serving, ImagesChange: true, Granted: true, Concurrency: 2, Rolling: 9}, true, rolloutGranted},
		{"slot-free", rolloutInput{Live: serving, ImagesChange: true, Concurrency: 2, Rolling: 1}, true, rolloutSlotFree},
		{"none-rolling", rolloutInput{Live: serving, ImagesChange: true, Concurrency: 1}, true, rolloutSlotFree},
		{"full", rolloutInput{Live: serving, ImagesChange: true, Concurrency: 2, Rolling: 2, Kept: "agent:v1"}, false, rolloutWaiting},
		{"over-full", rolloutInput{Live: serving, ImagesChange: true, Concurrency: 2, Rolling: 7}, false, rolloutWaiting},
		{"free-but-others-waited-longer", rolloutInput{Live: serving, ImagesChange: true, Concurrency: 2, Rolling: 1, Ahead: 1}, false, rolloutWaiting},
		{"free-for-the-first-in-line", rolloutInput{Live: serving, ImagesChange: true, Concurrency: 3, Rolling: 1, Ahead: 1}, true, rolloutSlotFree},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decideRollout(tc.in)
			if d.Move != tc.move || d.Reason != tc.reason || d.Message == "" {
				t.Errorf("decision %+v, want move %v reason %s", d, tc.move, tc.reason)
			}
		})
	}
	d := decideRollout(rolloutInput{Live: serving, ImagesChange: true, Concurrency: 2, Rolling: 2, Kept: "agent:v1"})
	for _, want := range []string{"at most 2 gateways", flagRolloutConcurrency, "keeps agent:v1"} {
		if !strings.Contains(d.Message, want) {
			t.Errorf("message %q lacks %q", d.Message, want)
		}
	}
}

func TestKeepImages(t *testing.T) {
	opts := children.Options{AgentImage: "gw:v2", StrongSwanImage: "gw:v2"}
	live := func(containers ...corev1.Container) *appsv1.Deployment {
		d := &appsv1.Deployment{}
		d.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: children.ContainerAgentInit, Image: "gw:v1"}}
		d.Spec.Template.Spec.Containers = containers
		return d
	}
	for _, tc := range []struct {
		name        string
		live        *appsv1.Deployment
		agent, swan string
		change      bool
		kept        string
	}{
		{"ipsec-v1", live(corev1.Container{Name: children.ContainerCharon, Image: "gw:v1"}, corev1.Container{Name: children.ContainerAgent, Image: "gw:v1"}), "gw:v1", "gw:v1", true, "gw:v1"},
		{"wireguard-v1", live(corev1.Container{Name: children.ContainerAgent, Image: "gw:v1"}), "gw:v1", "gw:v2", true, "gw:v1"},
		{"current", live(corev1.Container{Name: children.ContainerCharon, Image: "gw:v2"}, corev1.Container{Name: children.ContainerAgent, Image: "gw:v2"}), "gw:v2", "gw:v2", false, ""},
		{"charon-only", live(corev1.Container{Name: children.ContainerCharon, Image: "sw:v1"}, corev1.Container{Name: children.ContainerAgent, Image: "gw:v2"}), "gw:v2", "sw:v1", true, "sw:v1"},
		{"both-differ", live(corev1.Container{Name: children.ContainerCharon, Image: "sw:v1"}, corev1.Container{Name: children.ContainerAgent, Image: "gw:v1"}), "gw:v1", "sw:v1", true, "gw:v1 and sw:v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, change := keepImages(opts, tc.live)
			if got.AgentImage != tc.agent || got.StrongSwanImage != tc.swan || change != tc.change {
				t.Errorf("kept %s %s change %v, want %s %s %v", got.AgentImage, got.StrongSwanImage, change, tc.agent, tc.swan, tc.change)
			}
			if k := keptImages(got, opts); k != tc.kept {
				t.Errorf("named %q, want %q", k, tc.kept)
			}
		})
	}
}

// The gate counts rolling Deployments from the cache and the moves the cache does not show
// yet, lets the longest-waiting gateway go first, and forgets a gateway that is gone.
func TestRolloutGate(t *testing.T) {
	ctx := context.Background()
	rolled := func(name string) *appsv1.Deployment {
		d := deployment(t, "2/2 1:1/1/1")
		d.Name = name
		return d
	}
	rolling := func(name string) *appsv1.Deployment {
		d := deployment(t, "3/2 1:1/1/1")
		d.Name = name
		return d
	}
	objs := []client.Object{rolled("a"), rolled("b"), rolled("c"), rolling("x")}
	c := fake.NewClientBuilder().WithScheme(kube.Scheme()).WithObjects(objs...).Build()
	now := time.Unix(1000, 0)
	g := newRolloutGate(2)
	g.now = func() time.Time { return now }
	key := func(n string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: n} }
	get := func(n string) *appsv1.Deployment {
		d := &appsv1.Deployment{}
		if err := c.Get(ctx, key(n), d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	decide := func(n string) rolloutDecision {
		t.Helper()
		d, _, err := g.decide(ctx, c, "", n, key(n), rolloutInput{Live: get(n), ImagesChange: true})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// x rolls: one place is left; a takes it (its apply not in the cache yet), b waits.
	if d := decide("a"); !d.Move {
		t.Fatalf("a: %+v", d)
	}
	if d := decide("b"); d.Move {
		t.Fatalf("b moved while x and a (not in the cache yet) roll: %+v", d)
	}
	// a again, before the cache shows its apply: still let move.
	if d := decide("a"); !d.Move || d.Reason != rolloutGranted {
		t.Fatalf("a again: %+v", d)
	}
	now = now.Add(time.Second)
	if d := decide("c"); d.Move {
		t.Fatalf("c: %+v", d)
	}
	// x finishes: b waited longer than c and goes first.
	x := get("x")
	x.Status.ObservedGeneration = x.Generation
	if err := c.Status().Update(ctx, x); err != nil {
		t.Fatal(err)
	}
	if d := decide("c"); d.Move {
		t.Fatalf("c moved before b, which waited longer: %+v", d)
	}
	if d := decide("b"); !d.Move || d.Reason != rolloutSlotFree {
		t.Fatalf("b: %+v", d)
	}
	if len(g.waiting) != 1 || len(g.granted) != 2 {
		t.Errorf("waiting %v granted %v", g.waiting, g.granted)
	}
	// b is deleted: its place is free again for c.
	g.forget(key("b"))
	if d := decide("c"); !d.Move {
		t.Fatalf("c after b was forgotten: %+v", d)
	}
	// A move the cache never shows stops counting after grantTTL.
	g2 := newRolloutGate(1)
	g2.now = func() time.Time { return now }
	if d, _, _ := g2.decide(ctx, c, "", "a", key("a"), rolloutInput{Live: get("a"), ImagesChange: true}); !d.Move {
		t.Fatalf("a: %+v", d)
	}
	if d, _, _ := g2.decide(ctx, c, "", "b", key("b"), rolloutInput{Live: get("b"), ImagesChange: true}); d.Move {
		t.Fatalf("b: %+v", d)
	}
	now = now.Add(grantTTL + time.Second)
	if d, _, _ := g2.decide(ctx, c, "", "b", key("b"), rolloutInput{Live: get("b"), ImagesChange: true}); !d.Move {
		t.Fatalf("b after a's grant expired: %+v", d)
	}
	// A waiting gateway whose pass rendered nothing leaves the line.
	if d, _, _ := g2.decide(ctx, c, "", "c", key("c"), rolloutInput{Live: get("c"), ImagesChange: true}); d.Move {
		t.Fatalf("c: %+v", d)
	}
	g2.leave(key("c"))
	if len(g2.waiting) != 0 {
		t.Errorf("waiting after c left: %v", g2.waiting)
	}
}
