package migrate

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/manifests"
)

const (
	// FieldManager owns the fields of the objects kubectl vpn migrate applies.
	FieldManager = "kubectl-vpn-migrate"
	// AnnotationHandover on the new VPNGateway is when kubectl vpn migrate saw the legacy
	// gateway released; writing it makes the operator look at the gateway at once.
	AnnotationHandover = "vpn.bnerd.net/handover-at"
	// migratePoll is how often --apply reads the new objects while it waits: the outage it
	// prints is measured to this precision.
	migratePoll = 250 * time.Millisecond
)

// Options are what kubectl vpn migrate ipsecgateway is asked.
type Options struct {
	Namespace string
	// IPsecGateway is the legacy object's name.
	IPsecGateway string
	Names        Names
	// DryRun is "client" (print the objects as planned) or "server" (print them once the
	// API server has accepted them in a dry run); with Apply it is not read.
	DryRun string
	// Apply applies the objects, hands the endpoint over, waits (Timeout) and deletes the
	// IPsecGateway unless KeepLegacy.
	Apply      bool
	Timeout    time.Duration
	KeepLegacy bool
	// Output is the format the objects are printed in: yaml or json.
	Output string
	// Kubectl is the kubectl command line, with the --kubeconfig and --context of this run,
	// that the printed rollback commands start with.
	Kubectl string
	// Now is the clock the cutover is timed with.
	Now func() time.Time
}

// Run migrates the IPsecGateway as o asks: the objects printed (a dry run), or applied and
// the endpoint handed over. What happens is written to out; warnings, and on failure what is
// in the cluster and how to roll it back, to errOut.
func Run(ctx context.Context, c client.Client, o Options, out, errOut io.Writer) error {
	ns, name := o.Namespace, o.IPsecGateway
	var legacyGW ipsecv1.IPsecGateway
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &legacyGW); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("IPsecGateway %s/%s not found", ns, name)
		}
		return fmt.Errorf("reading IPsecGateway %s/%s: %w", ns, name, err)
	}
	plan, err := NewPlan(&legacyGW, o.Names)
	if err != nil {
		return err
	}
	for _, w := range plan.Warnings {
		warnf(errOut, "%s", w)
	}
	if !o.Apply && o.DryRun == "client" {
		return manifests.Write(out, o.Output, plan.objects())
	}
	existing, err := checkAgainstCluster(ctx, c, plan)
	if err != nil {
		return err
	}
	if !o.Apply {
		return manifests.Write(out, o.Output, plan.objects())
	}
	m := &migration{c: c, legacy: &legacyGW, plan: plan, timeout: o.Timeout, keepLegacy: o.KeepLegacy,
		kubectlCmd: o.Kubectl, now: o.Now, out: out, errOut: errOut}
	return m.run(ctx, existing)
}

func warnf(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "warning: "+format+"\n", args...)
}

// objects are the plan's objects in apply order: the gateway, then its peers.
func (p *Plan) objects() []client.Object {
	out := []client.Object{p.Gateway}
	for i := range p.Peers {
		out = append(out, &p.Peers[i])
	}
	return out
}

// objectRef is "vpngateway/acme", as kubectl names it.
func objectRef(obj client.Object) string {
	kind := "vpngateway"
	if _, ok := obj.(*vpnv1.VPNPeer); ok {
		kind = "vpnpeer"
	}
	return kind + "/" + obj.GetName()
}

// checkAgainstCluster refuses, with every reason at once, a plan the cluster cannot take as it
// is: an object of the same name that exists and differs, another VPNPeer on the new gateway,
// an object the API server refuses (server-side dry run). It returns the objects that exist
// already, identical (a migration run before).
func checkAgainstCluster(ctx context.Context, c client.Client, plan *Plan) (map[string]bool, error) {
	gw := plan.Gateway
	existing := map[string]bool{}
	var refused []string
	for _, obj := range plan.objects() {
		cur := obj.DeepCopyObject().(client.Object)
		err := c.Get(ctx, client.ObjectKeyFromObject(obj), cur)
		switch {
		case apierrors.IsNotFound(err):
			// what the API server makes of it (schema, CEL rules, defaults), without creating it
			probe := obj.DeepCopyObject().(client.Object)
			if err := c.Create(ctx, probe, client.DryRunAll); err != nil {
				refused = append(refused, fmt.Sprintf("%s: the API server refuses it: %v", objectRef(obj), err))
			}
		case err != nil:
			return nil, fmt.Errorf("reading %s: %w", objectRef(obj), err)
		default:
			// the object as the API server would store it (defaults applied), under a
			// generated name, compared with the existing one
			probe := obj.DeepCopyObject().(client.Object)
			probe.SetName("")
			probe.SetGenerateName("migrate-check-")
			if err := c.Create(ctx, probe, client.DryRunAll); err != nil {
				refused = append(refused, fmt.Sprintf("%s: the API server refuses it: %v", objectRef(obj), err))
				continue
			}
			if diff := specDiff(cur, probe); len(diff) > 0 {
				refused = append(refused, fmt.Sprintf("%s exists and is not the migrated one (%s differ): delete it, or choose other names (--gateway, --peer-prefix)",
					objectRef(obj), strings.Join(diff, ", ")))
				continue
			}
			existing[objectRef(obj)] = true
		}
	}
	var peers vpnv1.VPNPeerList
	if err := c.List(ctx, &peers, client.InNamespace(gw.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the VPNPeers of namespace %s: %w", gw.Namespace, err)
	}
	ours := map[string]bool{}
	for _, p := range plan.Peers {
		ours[p.Name] = true
	}
	for _, p := range peers.Items {
		if p.Spec.GatewayRef == gw.Name && !ours[p.Name] {
			refused = append(refused, fmt.Sprintf("vpnpeer/%s references VPNGateway %s already (spec.gatewayRef): the migrated gateway's peers must be exactly the legacy tunnels, or the grants would change", p.Name, gw.Name))
		}
	}
	if len(refused) > 0 {
		return nil, &Refused{Legacy: gw.Namespace + "/" + gw.Annotations[AnnotationMigratedFrom], Reasons: refused}
	}
	return existing, nil
}

// specDiff names the spec fields (JSON paths) where two objects differ.
func specDiff(a, b client.Object) []string {
	spec := func(obj client.Object) any {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return nil
		}
		return u["spec"]
	}
	var out []string
	diffPaths("spec", spec(a), spec(b), &out)
	return out
}

func diffPaths(path string, a, b any, out *[]string) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if !aok || !bok {
		if !reflect.DeepEqual(a, b) {
			*out = append(*out, path)
		}
		return
	}
	keys := map[string]bool{}
	for k := range am {
		keys[k] = true
	}
	for k := range bm {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		diffPaths(path+"."+k, am[k], bm[k], out)
	}
}

// migration is one --apply run.
type migration struct {
	c          client.Client
	legacy     *ipsecv1.IPsecGateway
	plan       *Plan
	timeout    time.Duration
	keepLegacy bool

	// applied are the new objects in the cluster (created now or found identical).
	applied []client.Object
	// handedOver: the IPsecGateway carries the migrated-to annotation.
	handedOver bool

	kubectlCmd  string
	now         func() time.Time
	out, errOut io.Writer
}

func (m *migration) run(ctx context.Context, existing map[string]bool) error {
	out := m.out
	for _, obj := range m.plan.objects() {
		ref := objectRef(obj)
		if existing[ref] {
			m.applied = append(m.applied, obj)
			fmt.Fprintf(out, "%s unchanged\n", qualified(ref))
			continue
		}
		if err := applyObject(ctx, m.c, obj); err != nil {
			return m.fail(fmt.Errorf("applying %s: %w", ref, err))
		}
		m.applied = append(m.applied, obj)
		fmt.Fprintf(out, "%s applied (server-side, field manager %s)\n", qualified(ref), FieldManager)
	}

	target := m.plan.Gateway.Name
	var handover time.Time
	if m.legacy.Annotations[ipsecv1.AnnotationMigratedTo] == target {
		m.handedOver = true
		fmt.Fprintf(out, "ipsecgateway.ipsec.bnerd.net/%s was handed over to VPNGateway %s before this run (%s): the outage is not measured\n",
			m.legacy.Name, target, ipsecv1.AnnotationMigratedTo)
	} else {
		var err error
		if handover, err = m.handOver(ctx); err != nil {
			return m.fail(fmt.Errorf("handing the endpoint over (annotating IPsecGateway %s %s=%s): %w", m.legacy.Name, ipsecv1.AnnotationMigratedTo, target, err))
		}
		m.handedOver = true
		fmt.Fprintf(out, "ipsecgateway.ipsec.bnerd.net/%s annotated %s=%s: the endpoint is handed over (%s)\n",
			m.legacy.Name, ipsecv1.AnnotationMigratedTo, target, handover.UTC().Format(time.RFC3339))
	}

	start := handover
	if start.IsZero() {
		start = m.now()
	}
	deadline := start.Add(m.timeout)
	var st *migrationState
	var waiting string
	stamped := false
	for {
		if !stamped {
			stamped = m.stampOnceReleased(ctx, start)
		}
		var err error
		st, err = m.observe(ctx)
		if err != nil && ctx.Err() == nil {
			return m.fail(err)
		}
		if st != nil && st.done() {
			break
		}
		now := m.now()
		// the cutover's timeline: what is awaited, each time that changes
		if w := st.waitingFor(); st != nil && w != waiting {
			fmt.Fprintf(out, "  +%.1fs waiting for %s\n", now.Sub(start).Seconds(), w)
			waiting = w
		}
		if ctx.Err() != nil || !now.Before(deadline) {
			why := fmt.Sprintf("timed out after %v", m.timeout)
			if ctx.Err() != nil && now.Before(deadline) {
				why = "interrupted"
			}
			if st != nil {
				m.printState(m.errOut, st)
				fmt.Fprintln(m.errOut)
			}
			return m.fail(fmt.Errorf("%s waiting for %s", why, st.waitingFor()))
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(migratePoll, deadline.Sub(now))):
		}
	}
	connected := m.now()
	if !handover.IsZero() {
		fmt.Fprintf(out, "outage: %.1fs (from the handover to every new VPNPeer Connected, measured every %v)\n",
			connected.Sub(handover).Seconds(), migratePoll)
	}
	fmt.Fprintln(out)
	m.printState(out, st)
	fmt.Fprintln(out)

	if m.keepLegacy {
		fmt.Fprintf(out, "ipsecgateway.ipsec.bnerd.net/%s kept (released: the operator leaves it alone); delete it with: %s delete ipsecgateway %s\n",
			m.legacy.Name, m.kubectl(), m.legacy.Name)
		return nil
	}
	// as kubectl deletes it: what the operator rendered for it and did not delete at the
	// handover (a NetworkAttachmentDefinition) goes with it
	uid := m.legacy.UID
	if err := m.c.Delete(ctx, m.legacy, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("the migration is complete, but deleting the released IPsecGateway %s failed: %w (delete it with: %s delete ipsecgateway %s)",
			m.legacy.Name, err, m.kubectl(), m.legacy.Name)
	}
	// its finalizer is removed by the operator without touching the cloud
	gone := m.now().Add(30 * time.Second)
	for {
		err := m.c.Get(ctx, client.ObjectKeyFromObject(m.legacy), &ipsecv1.IPsecGateway{})
		if apierrors.IsNotFound(err) {
			fmt.Fprintf(out, "ipsecgateway.ipsec.bnerd.net/%s deleted\n", m.legacy.Name)
			return nil
		}
		if ctx.Err() != nil || !m.now().Before(gone) {
			warnf(m.errOut, "IPsecGateway %s is deleted but still present (its finalizer is the operator's): %s get ipsecgateway %s", m.legacy.Name, m.kubectl(), m.legacy.Name)
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(migratePoll):
		}
	}
}

// reasonMigrated is the legacy gateway's Ready reason once the operator has released it (its
// pod deleted, its service CIDR given up): internal/controller's ReasonMigrated, which the
// plugin does not link.
const reasonMigrated = "Migrated"

// stampOnceReleased stamps the new VPNGateway with AnnotationHandover once the operator has
// released the IPsecGateway (or it is gone), and says whether it did. The change makes the
// operator look at the gateway at once: a gateway that found the service CIDR or the node
// still held by the legacy one would otherwise wait for its next retry.
func (m *migration) stampOnceReleased(ctx context.Context, since time.Time) bool {
	cur := &ipsecv1.IPsecGateway{}
	err := m.c.Get(ctx, client.ObjectKeyFromObject(m.legacy), cur)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return false
	default:
		c := meta.FindStatusCondition(cur.Status.Conditions, vpnv1.ConditionReady)
		if c == nil || c.Reason != reasonMigrated {
			return false
		}
	}
	now := m.now()
	fmt.Fprintf(m.out, "ipsecgateway.ipsec.bnerd.net/%s released by the operator (%.1fs after the handover)\n", m.legacy.Name, now.Sub(since).Seconds())
	gw := &vpnv1.VPNGateway{}
	gw.Namespace, gw.Name = m.plan.Gateway.Namespace, m.plan.Gateway.Name
	stamp := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, AnnotationHandover, now.UTC().Format(time.RFC3339Nano))
	if err := m.c.Patch(ctx, gw, client.RawPatch(types.MergePatchType, []byte(stamp))); err != nil {
		warnf(m.errOut, "annotating VPNGateway %s %s: %v (the operator picks the gateway up at its next retry)", gw.Name, AnnotationHandover, err)
	}
	return true
}

// handOver annotates the IPsecGateway as it is now, provided it still plans to the objects
// applied, and returns when. The patch is a JSON patch that tests the object's UID and
// generation first: its status changes all the time (the agent writes its tunnels' counters),
// so a resourceVersion lock would lose the race; a spec change since the check fails it.
func (m *migration) handOver(ctx context.Context) (time.Time, error) {
	target := m.plan.Gateway.Name
	for attempt := 0; ; attempt++ {
		cur := &ipsecv1.IPsecGateway{}
		if err := m.c.Get(ctx, client.ObjectKeyFromObject(m.legacy), cur); err != nil {
			return time.Time{}, err
		}
		again, err := NewPlan(cur, Names{Gateway: target, PeerPrefix: m.plan.prefix})
		if err != nil {
			return time.Time{}, fmt.Errorf("the IPsecGateway changed since it was read: %w", err)
		}
		if cur.UID != m.legacy.UID || !samePlan(again, m.plan) {
			return time.Time{}, errors.New("the IPsecGateway changed since it was read: it no longer translates to the objects applied")
		}
		ops := []map[string]any{
			{"op": "test", "path": "/metadata/uid", "value": cur.UID},
			{"op": "test", "path": "/metadata/generation", "value": cur.Generation},
		}
		if cur.Annotations == nil {
			ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations", "value": map[string]string{ipsecv1.AnnotationMigratedTo: target}})
		} else {
			key := strings.NewReplacer("~", "~0", "/", "~1").Replace(ipsecv1.AnnotationMigratedTo)
			ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations/" + key, "value": target})
		}
		patch, err := json.Marshal(ops)
		if err != nil {
			return time.Time{}, err
		}
		at := m.now()
		if err := m.c.Patch(ctx, cur, client.RawPatch(types.JSONPatchType, patch)); err != nil {
			if attempt < 3 && (apierrors.IsInvalid(err) || apierrors.IsConflict(err)) {
				continue // changed in between: read and check again
			}
			return time.Time{}, err
		}
		m.legacy = cur
		return at, nil
	}
}

// samePlan: both plans write the same objects.
func samePlan(a, b *Plan) bool {
	if len(a.Peers) != len(b.Peers) || !reflect.DeepEqual(a.Gateway.ObjectMeta, b.Gateway.ObjectMeta) || !reflect.DeepEqual(a.Gateway.Spec, b.Gateway.Spec) {
		return false
	}
	for i := range a.Peers {
		if !reflect.DeepEqual(a.Peers[i].ObjectMeta, b.Peers[i].ObjectMeta) || !reflect.DeepEqual(a.Peers[i].Spec, b.Peers[i].Spec) {
			return false
		}
	}
	return true
}

// applyObject server-side applies the object's metadata (name, namespace, annotations) and spec.
func applyObject(ctx context.Context, c client.Client, obj client.Object) error {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	delete(u, "status")
	if md, ok := u["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u}), client.FieldOwner(FieldManager))
}

// migrationState is what --apply waits for.
type migrationState struct {
	gateway *vpnv1.VPNGateway
	peers   []*vpnv1.VPNPeer // nil where not found
	names   []string
}

func (m *migration) observe(ctx context.Context) (*migrationState, error) {
	st := &migrationState{gateway: &vpnv1.VPNGateway{}}
	if err := m.c.Get(ctx, client.ObjectKeyFromObject(m.plan.Gateway), st.gateway); err != nil {
		return nil, fmt.Errorf("reading VPNGateway %s: %w", m.plan.Gateway.Name, err)
	}
	for i := range m.plan.Peers {
		p := &vpnv1.VPNPeer{}
		if err := m.c.Get(ctx, client.ObjectKeyFromObject(&m.plan.Peers[i]), p); err != nil {
			return nil, fmt.Errorf("reading VPNPeer %s: %w", m.plan.Peers[i].Name, err)
		}
		st.peers = append(st.peers, p)
		st.names = append(st.names, p.Name)
	}
	return st, nil
}

func (s *migrationState) gatewayReady() bool {
	c := meta.FindStatusCondition(s.gateway.Status.Conditions, vpnv1.ConditionReady)
	return c != nil && c.Status == "True" && s.gateway.Status.ObservedGeneration >= s.gateway.Generation
}

func peerConnected(p *vpnv1.VPNPeer) bool {
	c := meta.FindStatusCondition(p.Status.Conditions, vpnv1.ConditionConnected)
	return c != nil && c.Status == "True"
}

func (s *migrationState) done() bool {
	if !s.gatewayReady() {
		return false
	}
	for _, p := range s.peers {
		if !peerConnected(p) {
			return false
		}
	}
	return true
}

// waitingFor names what is not there yet.
func (s *migrationState) waitingFor() string {
	if s == nil {
		return "the new objects"
	}
	now := func(conds []metav1.Condition, typ string) string {
		c := meta.FindStatusCondition(conds, typ)
		if c == nil {
			return "not reported"
		}
		return string(c.Status) + ", " + c.Reason
	}
	var parts []string
	if !s.gatewayReady() {
		parts = append(parts, fmt.Sprintf("VPNGateway %s Ready (now %s)", s.gateway.Name, now(s.gateway.Status.Conditions, vpnv1.ConditionReady)))
	}
	for _, p := range s.peers {
		if !peerConnected(p) {
			parts = append(parts, fmt.Sprintf("VPNPeer %s Connected (now %s)", p.Name, now(p.Status.Conditions, vpnv1.ConditionConnected)))
		}
	}
	return strings.Join(parts, ", ")
}

// conditionText is "True (Reason)", "False (Reason: message)" or "Unknown" when not written.
func conditionText(conds []metav1.Condition, typ string) string {
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		return "Unknown"
	}
	return fmt.Sprintf("%s (%s)", c.Status, c.Reason)
}

func (m *migration) printState(w io.Writer, st *migrationState) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NEW OBJECT\tREADY / CONNECTED\tAUTHORIZED")
	ready := conditionText(st.gateway.Status.Conditions, vpnv1.ConditionReady)
	if c := meta.FindStatusCondition(st.gateway.Status.Conditions, vpnv1.ConditionReady); c != nil && c.Status != "True" && c.Message != "" {
		ready = fmt.Sprintf("%s (%s: %s)", c.Status, c.Reason, c.Message)
	}
	fmt.Fprintf(tw, "vpngateway/%s\t%s\t-\n", st.gateway.Name, ready)
	for _, p := range st.peers {
		fmt.Fprintf(tw, "vpnpeer/%s\t%s\t%s\n", p.Name,
			conditionText(p.Status.Conditions, vpnv1.ConditionConnected), conditionText(p.Status.Conditions, vpnv1.ConditionAuthorized))
	}
	_ = tw.Flush()
}

// fail says what is in the cluster now and how to roll it back, and returns err.
func (m *migration) fail(err error) error {
	w := m.errOut
	if len(m.applied) == 0 && !m.handedOver {
		fmt.Fprintln(w, "Nothing was applied.")
		return err
	}
	fmt.Fprintln(w, "In the cluster now:")
	for _, obj := range m.applied {
		fmt.Fprintf(w, "  %s\n", qualified(objectRef(obj)))
	}
	if m.handedOver {
		fmt.Fprintf(w, "  ipsecgateway.ipsec.bnerd.net/%s: released (annotated %s=%s), kept\n", m.legacy.Name, ipsecv1.AnnotationMigratedTo, m.plan.Gateway.Name)
	} else {
		fmt.Fprintf(w, "  ipsecgateway.ipsec.bnerd.net/%s: unchanged, still serving the client\n", m.legacy.Name)
	}
	fmt.Fprintln(w, "To roll back (run again to retry instead: what exists is taken as it is):")
	var peers []string
	gateway := false
	for _, obj := range m.applied {
		if _, ok := obj.(*vpnv1.VPNPeer); ok {
			peers = append(peers, obj.GetName())
		} else {
			gateway = true
		}
	}
	if len(peers) > 0 {
		fmt.Fprintf(w, "  %s delete vpnpeer %s\n", m.kubectl(), strings.Join(peers, " "))
	}
	if gateway {
		fmt.Fprintf(w, "  %s delete vpngateway %s\n", m.kubectl(), m.plan.Gateway.Name)
	}
	if m.handedOver {
		fmt.Fprintf(w, "  %s annotate ipsecgateway %s %s-\n", m.kubectl(), m.legacy.Name, ipsecv1.AnnotationMigratedTo)
		fmt.Fprintln(w, "(in this order: the new gateway gives the endpoint up when deleted, then the legacy gateway takes it back)")
	}
	return err
}

// kubectl is the kubectl command line for the legacy object's namespace, with the
// --kubeconfig and --context this run was given.
func (m *migration) kubectl() string {
	return cmp.Or(m.kubectlCmd, "kubectl") + " -n " + m.legacy.Namespace
}

func qualified(ref string) string {
	kind, name, _ := strings.Cut(ref, "/")
	return kind + ".vpn.bnerd.net/" + name
}
