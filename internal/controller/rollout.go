package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// The operator's gateway images (--agent-image, --strongswan-image) are part of every
// gateway's pod template, so a new one — an operator upgrade — would replace every gateway's
// pod at the same moment. The rollout gate lets a bounded number of gateways move to new
// images at a time (Options.RolloutConcurrency): a gateway that may not move yet is rendered
// with the images its Deployment runs (everything else about it is applied as usual) and
// looks again later, or when a rolling gateway finishes.

const (
	// ConditionRolloutPending is True while the gateway keeps the images its pod runs because
	// as many gateways as --gateway-rollout-concurrency allows are rolling; absent otherwise.
	// Ready does not depend on it: the gateway serves as before.
	ConditionRolloutPending = "RolloutPending"
	// ReasonConcurrencyLimit is RolloutPending's reason.
	ReasonConcurrencyLimit = "ConcurrencyLimit"

	// DefaultRolloutConcurrency is the operator's default --gateway-rollout-concurrency.
	DefaultRolloutConcurrency = 5
	// flagRolloutConcurrency names the setting in messages.
	flagRolloutConcurrency = "--gateway-rollout-concurrency"
)

// Events of a gateway's move to new gateway images.
const (
	// EventRolloutPending: the gateway keeps the images its pod runs (RolloutPending appears).
	EventRolloutPending = "RolloutPending"
	// EventRolloutStarted: a gateway that waited moves to the operator's images.
	EventRolloutStarted = "RolloutStarted"
)

// recordRolloutTransition emits an Event when the gateway starts waiting for new gateway
// images, and when it stops (it moves to them, or nothing is held any more).
func recordRolloutTransition(rec events.EventRecorder, obj client.Object, before, after []metav1.Condition) {
	was, now := findCondition(before, ConditionRolloutPending), findCondition(after, ConditionRolloutPending)
	switch {
	case was == nil && now != nil:
		rec.Eventf(obj, nil, corev1.EventTypeNormal, EventRolloutPending, "Rollout", "%s", truncate(now.Message, 1000))
	case was != nil && now == nil:
		rec.Eventf(obj, nil, corev1.EventTypeNormal, EventRolloutStarted, "Rollout", "the gateway no longer waits: it runs, or moves to, the operator's gateway images")
	}
}

// Why a gateway moves to the operator's images now, or why not (rolloutDecision.Reason).
const (
	rolloutNoDeployment   = "NoDeployment"
	rolloutImagesCurrent  = "ImagesCurrent"
	rolloutUnbounded      = "Unbounded"
	rolloutPodReplaced    = "PodReplacedAnyway"
	rolloutNotServing     = "NotServing"
	rolloutGranted        = "Granted"
	rolloutSlotFree       = "SlotFree"
	rolloutWaiting        = ReasonConcurrencyLimit
	progressDeadlineError = "ProgressDeadlineExceeded"
	newReplicaSetReady    = "NewReplicaSetAvailable"
)

// rolloutInput is what decideRollout decides from.
type rolloutInput struct {
	// Live is the gateway's Deployment as the cache shows it; nil: it has none yet.
	Live *appsv1.Deployment
	// ImagesChange: the rendering's images differ from those Live's pod template runs.
	ImagesChange bool
	// PodChangesAnyway: Live's pod template changes even when its images are kept (the
	// gateway's spec, or the rest of the operator's rendering, changed).
	PodChangesAnyway bool
	// Granted: an earlier pass let this gateway move and the cache does not show it yet.
	Granted bool
	// Rolling is the number of other gateways whose Deployment is rolling (deploymentRolling,
	// plus those let move whose change the cache does not show yet).
	Rolling int
	// Ahead is the number of gateways that have waited longer than this one.
	Ahead int
	// Concurrency is --gateway-rollout-concurrency; 0: unbounded.
	Concurrency int
	// Kept names the images the gateway keeps while it waits (for the message).
	Kept string
}

// rolloutDecision says whether the gateway moves to the operator's images now.
type rolloutDecision struct {
	Move    bool
	Reason  string
	Message string
}

// decideRollout is the rollout policy, free of I/O. A gateway moves to the operator's images
// at once when it has no Deployment yet (a new gateway), when its images are already the
// operator's, when the rollout is unbounded, when its pod is replaced anyway (its spec
// changed: holding the images back would cost a second restart later), or when no pod of it
// is available (it serves nothing that a restart could interrupt, and a new image may be
// what it needs). Otherwise it moves when fewer than Concurrency gateways are rolling,
// counting those that have waited longer first.
func decideRollout(in rolloutInput) rolloutDecision {
	switch {
	case in.Live == nil:
		return rolloutDecision{true, rolloutNoDeployment, "a new gateway starts with the operator's images"}
	case !in.ImagesChange:
		return rolloutDecision{true, rolloutImagesCurrent, "the gateway runs the operator's images"}
	case in.Concurrency <= 0:
		return rolloutDecision{true, rolloutUnbounded, "the rollout of new images is not bounded (" + flagRolloutConcurrency + " 0)"}
	case in.PodChangesAnyway:
		return rolloutDecision{true, rolloutPodReplaced, "the gateway's pod is replaced for another change: it takes the new images along"}
	case in.Live.Status.AvailableReplicas == 0:
		return rolloutDecision{true, rolloutNotServing, "no pod of the gateway is available: nothing is interrupted by moving it"}
	case in.Granted:
		return rolloutDecision{true, rolloutGranted, "the gateway was let move to the new images"}
	case in.Rolling+in.Ahead < in.Concurrency:
		return rolloutDecision{true, rolloutSlotFree, fmt.Sprintf("%d gateways are rolling, at most %d at a time", in.Rolling, in.Concurrency)}
	}
	return rolloutDecision{false, rolloutWaiting, fmt.Sprintf(
		"at most %d gateways move to the operator's new images at a time (%s) and that many are rolling or waited longer: the pod keeps %s until this gateway's turn; everything else is applied",
		in.Concurrency, flagRolloutConcurrency, in.Kept)}
}

// deploymentRolling says whether a Deployment is replacing its pods: the Deployment
// controller has not seen its latest template yet, or not every replica runs it and is
// available. A rollout that reached its progress deadline (progressDeadlineSeconds, 10 min by
// default) is stalled, not rolling, and so is a Deployment whose rollout completed and whose
// pod became unavailable later (Progressing stays NewReplicaSetAvailable): neither holds a
// place of the bound, so a broken gateway does not stop the others' rollout for longer than
// its deadline.
func deploymentRolling(d *appsv1.Deployment) bool {
	if d.Status.ObservedGeneration < d.Generation {
		return true
	}
	for _, c := range d.Status.Conditions {
		if c.Type != appsv1.DeploymentProgressing {
			continue
		}
		if (c.Status == corev1.ConditionFalse && c.Reason == progressDeadlineError) ||
			(c.Status == corev1.ConditionTrue && c.Reason == newReplicaSetReady) {
			return false
		}
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	return st.UpdatedReplicas < want || st.Replicas > st.UpdatedReplicas || st.AvailableReplicas < want
}

// keepImages returns opts with the images the live Deployment's pod template runs (the agent's
// and charon's, where it has them), and whether they differ from the operator's.
func keepImages(opts children.Options, live *appsv1.Deployment) (children.Options, bool) {
	kept := opts
	spec := live.Spec.Template.Spec
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		switch {
		case c.Image == "":
		case c.Name == children.ContainerAgent:
			kept.AgentImage = c.Image
		case c.Name == children.ContainerCharon:
			kept.StrongSwanImage = c.Image
		}
	}
	return kept, kept.AgentImage != opts.AgentImage || kept.StrongSwanImage != opts.StrongSwanImage
}

// keptImages names the images of opts that differ from the operator's, for a message.
func keptImages(kept, operator children.Options) string {
	var out []string
	if kept.AgentImage != operator.AgentImage {
		out = append(out, kept.AgentImage)
	}
	if kept.StrongSwanImage != operator.StrongSwanImage && kept.StrongSwanImage != kept.AgentImage {
		out = append(out, kept.StrongSwanImage)
	}
	return strings.Join(out, " and ")
}

// podTemplateChanges says whether applying d would change the live Deployment's pod template:
// what the operator's field manager applied to it against d's.
func podTemplateChanges(live *appsv1.Deployment, d *appsv1ac.DeploymentApplyConfiguration) (bool, error) {
	applied, err := appsv1ac.ExtractDeployment(live, FieldOwner)
	if err != nil {
		return false, err
	}
	var was, will any
	if applied.Spec != nil && applied.Spec.Template != nil {
		was = applied.Spec.Template
	}
	if d.Spec != nil && d.Spec.Template != nil {
		will = d.Spec.Template
	}
	same, err := sameJSON(was, will)
	return !same, err
}

// rolloutGate is the reconcilers' shared view of the fleet's rollout: which gateways were let
// move and which wait, for the bound, the waiting gateways' order and the metrics. Keys are
// the gateways' Deployments. The Deployments themselves (the cache) are the truth on who is
// rolling; the gate adds what the cache may not show yet (a move let happen a moment ago).
type rolloutGate struct {
	concurrency int
	mu          sync.Mutex
	now         func() time.Time
	// granted: gateways let move, with the Deployment generation their pass saw, until the
	// cache shows a later one (or grantTTL passes: the apply may have failed).
	granted map[types.NamespacedName]grant
	// waiting: gateways held back, in the order they started waiting.
	waiting map[types.NamespacedName]rolloutWaiter
	// rolling: gateways whose Deployment their last pass saw rolling (or let move), for the
	// metric and to wake the waiting when one finishes.
	rolling map[types.NamespacedName]bool
	// wake and wakeLegacy enqueue waiting VPNGateways and IPsecGateways.
	wake, wakeLegacy chan event.GenericEvent
}

type grant struct {
	generation int64
	at         time.Time
}

type rolloutWaiter struct {
	kind, gateway string
	since, seen   time.Time
}

const (
	// grantTTL bounds how long a move the cache does not show yet counts.
	grantTTL = time.Minute
	// rolloutRetry is how soon the longest-waiting gateway looks again when no rolling
	// gateway's finish woke it; those further back look less often (rolloutRetryMax).
	rolloutRetry    = 15 * time.Second
	rolloutRetryMax = 2 * time.Minute
	// waiterStale: a waiting gateway not seen for this long (deleted, blocked) no longer
	// counts as waiting before others.
	waiterStale = 3 * rolloutRetryMax
)

// newRolloutGate starts with nothing rolling or waiting (a manager replaced in-process, its
// leader lease lost, reports no stale counts).
func newRolloutGate(concurrency int) *rolloutGate {
	rollouts.WithLabelValues(rolloutStateRolling).Set(0)
	rollouts.WithLabelValues(rolloutStateWaiting).Set(0)
	return &rolloutGate{
		concurrency: concurrency, now: time.Now,
		granted: map[types.NamespacedName]grant{}, waiting: map[types.NamespacedName]rolloutWaiter{}, rolling: map[types.NamespacedName]bool{},
		wake: make(chan event.GenericEvent), wakeLegacy: make(chan event.GenericEvent),
	}
}

// decide runs decideRollout for the gateway whose Deployment is key (in.Live), counting the
// other gateways' rolling Deployments from c (the cache), and records the outcome: a move
// holds a place until the cache shows it, a held gateway queues. It also returns how soon a
// held gateway should look again.
func (g *rolloutGate) decide(ctx context.Context, c client.Reader, kind, gateway string, key types.NamespacedName, in rolloutInput) (rolloutDecision, time.Duration, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	in.Concurrency = g.concurrency
	if gr, ok := g.granted[key]; ok {
		if in.Live == nil || in.Live.Generation > gr.generation || now.Sub(gr.at) > grantTTL {
			delete(g.granted, key)
		} else {
			in.Granted = true
		}
	}
	if in.Live != nil && in.ImagesChange && in.Concurrency > 0 {
		rolling, err := g.countRolling(ctx, c, key, now)
		if err != nil {
			return rolloutDecision{}, 0, err
		}
		in.Rolling = rolling
		in.Ahead = g.ahead(key, now)
	}
	d := decideRollout(in)
	var retry time.Duration
	switch {
	case !d.Move:
		w, ok := g.waiting[key]
		if !ok {
			w = rolloutWaiter{kind: kind, gateway: gateway, since: now}
		}
		w.seen = now
		g.waiting[key] = w
		retry = min(rolloutRetry*time.Duration(1+in.Ahead/max(in.Concurrency, 1)), rolloutRetryMax)
	case in.ImagesChange && in.Live != nil:
		g.granted[key] = grant{generation: in.Live.Generation, at: now}
		delete(g.waiting, key)
	default:
		delete(g.waiting, key)
	}
	// Rolling, for the metric and for waking the waiting when it finishes: its Deployment as
	// the cache shows it, or about to be (moved now).
	g.observeLocked(key, in.Live != nil && (deploymentRolling(in.Live) || (d.Move && in.ImagesChange)))
	return d, retry, nil
}

// countRolling counts the operator's Deployments, other than key, that are rolling, and the
// moves let happen that the cache does not show yet.
func (g *rolloutGate) countRolling(ctx context.Context, c client.Reader, self types.NamespacedName, now time.Time) (int, error) {
	var list appsv1.DeploymentList
	// Read only, here: no copy of every gateway's Deployment.
	if err := c.List(ctx, &list, client.MatchingLabels{LabelManagedBy: LabelManagedByValue}, client.UnsafeDisableDeepCopy); err != nil {
		return 0, fmt.Errorf("listing the gateways' Deployments: %w", err)
	}
	n := 0
	counted := map[types.NamespacedName]bool{}
	generation := map[types.NamespacedName]int64{}
	for i := range list.Items {
		d := &list.Items[i]
		key := client.ObjectKeyFromObject(d)
		generation[key] = d.Generation
		if key != self && deploymentRolling(d) {
			n++
			counted[key] = true
		}
	}
	for key, gr := range g.granted {
		gen, listed := generation[key]
		switch {
		case now.Sub(gr.at) > grantTTL || (listed && gen > gr.generation):
			delete(g.granted, key) // the cache shows the move (counted above while it rolls)
		case key != self && !counted[key]:
			n++
		}
	}
	return n, nil
}

// ahead counts the gateways that have waited longer than key (ties: by name).
func (g *rolloutGate) ahead(key types.NamespacedName, now time.Time) int {
	w, ok := g.waiting[key]
	if !ok {
		w.since = now
	}
	n := 0
	for k, o := range g.waiting {
		if k == key {
			continue
		}
		if now.Sub(o.seen) > waiterStale {
			delete(g.waiting, k)
			continue
		}
		if o.since.Before(w.since) || (o.since.Equal(w.since) && k.String() < key.String()) {
			n++
		}
	}
	return n
}

// observe records whether the gateway whose Deployment is key is rolling (a pass that did not
// decide: none rendered).
func (g *rolloutGate) observe(key types.NamespacedName, rolling bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.observeLocked(key, rolling)
}

// leave takes a gateway out of the waiting whose pass rendered nothing (its configuration
// invalid, an error before the gate): it does not stand in line before the others.
func (g *rolloutGate) leave(key types.NamespacedName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.waiting[key]; ok {
		delete(g.waiting, key)
		rollouts.WithLabelValues(rolloutStateWaiting).Set(float64(len(g.waiting)))
	}
}

// forget drops a gateway that is gone or runs no pod.
func (g *rolloutGate) forget(key types.NamespacedName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.granted, key)
	delete(g.waiting, key)
	g.observeLocked(key, false)
}

// observeLocked records the gateway's rolling state, wakes the longest-waiting gateways when
// it stops rolling, and updates the metric.
func (g *rolloutGate) observeLocked(key types.NamespacedName, rolling bool) {
	was := g.rolling[key]
	if rolling {
		g.rolling[key] = true
	} else {
		delete(g.rolling, key)
	}
	if was && !rolling {
		g.wakeLocked()
	}
	rollouts.WithLabelValues(rolloutStateRolling).Set(float64(len(g.rolling)))
	rollouts.WithLabelValues(rolloutStateWaiting).Set(float64(len(g.waiting)))
}

// wakeLocked enqueues the longest-waiting gateways, as many as may move at a time: a place
// of the bound may have come free.
func (g *rolloutGate) wakeLocked() {
	keys := make([]types.NamespacedName, 0, len(g.waiting))
	for k := range g.waiting {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b types.NamespacedName) int {
		if c := g.waiting[a].since.Compare(g.waiting[b].since); c != 0 {
			return c
		}
		return strings.Compare(a.String(), b.String())
	})
	for _, k := range keys[:min(len(keys), max(g.concurrency, 1))] {
		w := g.waiting[k]
		meta := metav1.ObjectMeta{Namespace: k.Namespace, Name: w.gateway}
		if w.kind == model.KindIPsecGateway {
			obj := &ipsecv1.IPsecGateway{ObjectMeta: meta}
			go func() { g.wakeLegacy <- event.GenericEvent{Object: obj} }()
			continue
		}
		obj := &vpnv1.VPNGateway{ObjectMeta: meta}
		go func() { g.wake <- event.GenericEvent{Object: obj} }()
	}
}

// gateRollout decides whether the gateway moves to the operator's images in this pass. When
// it may not, it returns the children rendered with the images its Deployment runs instead of
// kids (the rest of the rendering is the same, and applied), and the gateway waits: its
// RolloutPending condition, and a pass again after s.rolloutRetry or when a rolling gateway
// finishes.
func (r *GatewayReconciler) gateRollout(ctx context.Context, s *gatewayScope, m *model.Gateway, owner metav1.OwnerReference, kids *children.Children) (*children.Children, error) {
	key := types.NamespacedName{Namespace: s.gw.Namespace, Name: children.NameFor(s.kind, s.gw.Name)}
	live := &appsv1.Deployment{}
	if err := r.Client.Get(ctx, key, live); apierrors.IsNotFound(err) {
		live = nil
	} else if err != nil {
		return nil, fmt.Errorf("reading Deployment %s: %w", key.Name, err)
	}
	in := rolloutInput{Live: live}
	held := kids
	if live != nil {
		opts, change := keepImages(r.Options.Render, live)
		in.ImagesChange = change
		if change && r.Options.RolloutConcurrency > 0 {
			var err error
			if held, err = children.Render(m, owner, opts); err != nil {
				return nil, fmt.Errorf("rendering the gateway with the images it runs: %w", err)
			}
			if a, ok := kids.Deployment.Spec.Template.Annotations[cloud.NetworksAnnotation]; ok {
				held.Deployment.Spec.Template.WithAnnotations(map[string]string{cloud.NetworksAnnotation: a})
			}
			if in.PodChangesAnyway, err = podTemplateChanges(live, held.Deployment); err != nil {
				return nil, fmt.Errorf("comparing Deployment %s with its rendering: %w", key.Name, err)
			}
			in.Kept = keptImages(opts, r.Options.Render)
		}
	}
	d, retry, err := r.rollouts.decide(ctx, r.Client, s.kind, s.gw.Name, key, in)
	if err != nil {
		return nil, err
	}
	s.rolloutGated = true
	if d.Move {
		if in.ImagesChange {
			ctrl.LoggerFrom(ctx).Info("gateway moves to the operator's images", "reason", d.Reason, "message", d.Message)
		}
		return kids, nil
	}
	s.rolloutPending, s.rolloutRetry = d.Message, retry
	return held, nil
}
