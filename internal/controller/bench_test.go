package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	corev1 "k8s.io/api/core/v1"
	"net/netip"
	"os"
	"runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/kube"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/operator"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testenv"
)

// BenchmarkControlPlane: 1,000 gateways × 10 peers (BENCH_GATEWAYS / BENCH_PEERS override)
// exist before the operator starts. It prints
//   - the time until every gateway is rendered and every peer has its Authorized condition;
//   - the API writes that took, by kind, against the minimum (minimumWrites);
//   - the writes in a steady-state window after that (BENCH_STEADY, default 60s);
//   - the operator's heap;
//   - in the same run on the same API server, the time a bare client takes to make exactly the
//     minimum writes (the same children and statuses, server-side applied with the same field
//     manager, rate limits and parallelism), and operator time / bare-client time.
//
// Goals: operator / bare ≤ 1.25, writes ≤ minimum + 5 %, 0 steady-state writes, heap ≤ 256 MiB.
func BenchmarkControlPlane(b *testing.B) {
	gateways, peers := envInt("BENCH_GATEWAYS", 1000), envInt("BENCH_PEERS", 10)
	steady := 60 * time.Second
	if d, err := time.ParseDuration(os.Getenv("BENCH_STEADY")); err == nil && d >= 0 {
		steady = d
	}
	for range b.N {
		benchControlPlane(b, gateways, peers, steady)
	}
}

// writeFloor is the least set of API writes that takes gateways and their peers (all of
// them existing, none converged) to converged: every child server-side applied once, the
// finalizer added once (a metadata write: it cannot ride on a status subresource write), and
// every gateway's and every peer's status applied once. Events are not part of it: they
// record, they do not converge anything.
type writeFloor struct {
	Children, Finalizers, GatewayStatuses, PeerStatuses int
}

// minimumWrites is the writeFloor of gateways gateways with peersPer peers each, whose
// children are childrenPerGateway objects (what children.Render produces for one of them).
func minimumWrites(gateways, peersPer, childrenPerGateway int) writeFloor {
	return writeFloor{
		Children:        gateways * childrenPerGateway,
		Finalizers:      gateways,
		GatewayStatuses: gateways,
		PeerStatuses:    gateways * peersPer,
	}
}

func (f writeFloor) Total() int {
	return f.Children + f.Finalizers + f.GatewayStatuses + f.PeerStatuses
}

// classify sorts writes by kind (testenv.WriteCounter.ByKind) into the floor's categories;
// events and anything unexpected are the rest.
func classify(byKind map[string]int64) (got writeFloor, events, other int) {
	for k, n := range byKind {
		_, resource, _ := strings.Cut(k, " ")
		switch {
		case k == "PATCH vpngateways":
			got.Finalizers += int(n)
		case k == "PATCH vpngateways/status":
			got.GatewayStatuses += int(n)
		case k == "PATCH vpnpeers/status":
			got.PeerStatuses += int(n)
		case resource == "events":
			events += int(n)
		case strings.HasPrefix(k, "PATCH ") && !strings.Contains(resource, "/"):
			got.Children += int(n)
		default:
			other += int(n)
		}
	}
	return got, events, other
}

// benchGateway is the i-th gateway of the bench and its peers (with their Secrets when
// secrets is set).
func benchGateway(ns string, i, peersPer int, secrets bool) []client.Object {
	gw := ipsecGateway(ns, fmt.Sprintf("gw-%04d", i))
	gw.Spec.ReverseExposures = nil
	gw.Spec.Endpoint.HostNetwork.NodeName = benchNode(i) // one gateway per node
	objs := []client.Object{gw}
	for j := range peersPer {
		name := fmt.Sprintf("gw-%04d-p%02d", i, j)
		if secrets {
			objs = append(objs, pskSecret(ns, name))
		}
		objs = append(objs, gen.VPNPeer(ns, name, gen.OnGateway(gw.Name), gen.RemoteSubnets(fmt.Sprintf("10.%d.%d.0/24", j, i%250)), gen.Grants("api")))
	}
	return objs
}

// benchNodes creates the nodes the bench's host-network gateways run on (one each), and
// deletes them when the benchmark ends.
func benchNodes(b *testing.B, n int) {
	parallel(b, n, func(i int) []client.Object {
		return []client.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: benchNode(i)}}}
	})
	b.Cleanup(func() {
		for i := range n {
			_ = env.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: benchNode(i)}})
		}
	})
}

func benchNode(i int) string { return fmt.Sprintf("node-%04d", i) }

// childKinds are the kinds of the children children.Render produces for the bench's gateway
// shape, one entry per child: the renderer, not this file, says how many there are.
func childKinds(b *testing.B, cfg operator.Config, objs []client.Object) []schema.GroupVersionKind {
	gw := objs[0].(*vpnv1.VPNGateway)
	var peers []vpnv1.VPNPeer
	for _, o := range objs[1:] {
		if p, ok := o.(*vpnv1.VPNPeer); ok {
			peers = append(peers, *p)
		}
	}
	built, errs := model.Build(model.Input{
		Gateway: gw, Peers: peers, Config: cfg.Model,
		ServiceCIDR:   netip.PrefixFrom(cfg.Model.PoolCIDR.Addr(), 24),
		PublicAddress: gw.Spec.Endpoint.HostNetwork.Address,
	})
	if built == nil {
		b.Fatalf("building the bench gateway: %v", errs)
	}
	yes := true
	kids, err := children.Render(built, metav1.OwnerReference{APIVersion: vpnv1.GroupVersion.String(), Kind: "VPNGateway", Name: gw.Name, UID: "bench", Controller: &yes}, cfg.Render)
	if err != nil {
		b.Fatal(err)
	}
	var kinds []schema.GroupVersionKind
	for _, ac := range kids.Objects() {
		raw, err := json.Marshal(ac)
		if err != nil {
			b.Fatal(err)
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(raw, &tm); err != nil {
			b.Fatal(err)
		}
		kinds = append(kinds, tm.GroupVersionKind())
	}
	return kinds
}

func benchControlPlane(b *testing.B, gateways, peersPer int, steady time.Duration) {
	ctx := context.Background()
	ns := namespace(b)
	cfg := operatorConfig()
	cfg.Concurrency = envInt("BENCH_CONCURRENCY", cfg.Concurrency)
	cfg.Model.PoolCIDR = netip.MustParsePrefix("100.80.0.0/12") // 4,096 /24s (the default /16 holds 256)
	kinds := childKinds(b, cfg, benchGateway(ns, 0, peersPer, false))
	floor := minimumWrites(gateways, peersPer, len(kinds))

	start := time.Now()
	benchNodes(b, gateways)
	parallel(b, gateways, func(i int) []client.Object { return benchGateway(ns, i, peersPer, true) })
	b.Logf("created %d gateways and %d peers in %s", gateways, gateways*peersPer, time.Since(start).Round(time.Millisecond))

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	// Watch progress through an informer cache: listing 10,000 peers every poll would load the
	// API server more than the operator does (and without copies: the bench shares the CPU
	// with the API server it measures).
	watcher, err := cache.New(env.Config, cache.Options{Scheme: operator.Scheme(), DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		b.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go func() { _ = watcher.Start(wctx) }()
	for _, o := range []client.Object{&vpnv1.VPNGateway{}, &vpnv1.VPNPeer{}} {
		if _, err := watcher.GetInformer(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
	watcher.WaitForCacheSync(ctx)

	var writes testenv.WriteCounter
	b.ResetTimer()
	start = time.Now()
	stop := startOperator(b, cfg, writes.Wrap(env.Config))
	// The operator's start (caches filled) ends with its first write.
	firstWrite := make(chan time.Duration, 1)
	go func() {
		for writes.Count() == 0 && time.Since(start) < 10*time.Minute {
			time.Sleep(10 * time.Millisecond) // sampling for a figure, not synchronisation
		}
		firstWrite <- time.Since(start)
	}()
	var gatewaysDone, peersDone time.Duration
	poll(b, 10*time.Minute, 200*time.Millisecond, func() error {
		var gws vpnv1.VPNGatewayList
		if err := watcher.List(ctx, &gws, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			return err
		}
		rendered := 0
		for _, gw := range gws.Items {
			if meta.IsStatusConditionTrue(gw.Status.Conditions, vpnv1.ConditionRendered) && gw.Status.ObservedGeneration == gw.Generation {
				rendered++
			}
		}
		var ps vpnv1.VPNPeerList
		if err := watcher.List(ctx, &ps, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			return err
		}
		authorized := 0
		for _, p := range ps.Items {
			if c := meta.FindStatusCondition(p.Status.Conditions, vpnv1.ConditionAuthorized); c != nil && c.Status == metav1.ConditionTrue {
				authorized++
			}
		}
		if rendered == gateways && gatewaysDone == 0 {
			gatewaysDone = time.Since(start)
		}
		if authorized == gateways*peersPer && peersDone == 0 {
			peersDone = time.Since(start)
		}
		if rendered < gateways || authorized < gateways*peersPer {
			return fmt.Errorf("%d/%d gateways rendered, %d/%d peers authorized", rendered, gateways, authorized, gateways*peersPer)
		}
		return nil
	})
	converge := time.Since(start)
	b.StopTimer()
	converged := writes.ByKind()

	// Steady state: nothing changes, so nothing may be written.
	time.Sleep(steady)
	steadyWrites := diffKinds(writes.ByKind(), converged)

	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	heap := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / (1 << 20)
	stop()

	bare, bareWrites := bareClientRun(b, ns, gateways, peersPer, kinds, cfg.Concurrency)

	got, events, other := classify(converged)
	total := got.Total() + events + other
	fmt.Printf("control plane: %d gateways x %d peers, concurrency %d\n", gateways, peersPer, cfg.Concurrency)
	fmt.Printf("  operator: converged in %s (first write %s, gateways rendered %s, peers authorized %s); bare client, minimum writes: %s; operator / bare = %.2f (goal <= 1.25)\n",
		converge.Round(time.Millisecond), (<-firstWrite).Round(time.Millisecond), gatewaysDone.Round(time.Millisecond), peersDone.Round(time.Millisecond),
		bare.Round(time.Millisecond), converge.Seconds()/bare.Seconds())
	fmt.Printf("  writes: %d, minimum %d (%+.1f %%, goal <= +5 %%): children %d/%d, finalizers %d/%d, gateway statuses %d/%d, peer statuses %d/%d, events %d/0, other %d/0; bare client %d\n",
		total, floor.Total(), 100*float64(total-floor.Total())/float64(floor.Total()),
		got.Children, floor.Children, got.Finalizers, floor.Finalizers, got.GatewayStatuses, floor.GatewayStatuses,
		got.PeerStatuses, floor.PeerStatuses, events, other, bareWrites)
	fmt.Printf("  writes by kind: %v\n", converged)
	fmt.Printf("  reconcile passes: %v\n", reconcilePasses())
	fmt.Printf("  steady state: %d writes in %s (goal 0) %v\n", sumKinds(steadyWrites), steady, steadyWrites)
	fmt.Printf("  operator heap %.0f MiB (goal <= 256 MiB)\n", heap)
	b.ReportMetric(converge.Seconds(), "s-converge")
	b.ReportMetric(converge.Seconds()/bare.Seconds(), "operator/bare")
	b.ReportMetric(float64(total), "writes")
	b.ReportMetric(float64(floor.Total()), "writes-min")
	b.ReportMetric(float64(sumKinds(steadyWrites)), "writes-steady")
	b.ReportMetric(heap, "MiB-heap")
}

// reconcilePasses are the passes each controller made so far (controller-runtime's metrics).
func reconcilePasses() map[string]float64 {
	out := map[string]float64{}
	mfs, _ := ctrlmetrics.Registry.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && m.GetCounter().GetValue() > 0 {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// bareClientRun makes, in a fresh namespace holding the same gateways and peers, exactly
// the minimum writes that converge them — the children and statuses the operator produced in
// src, server-side applied with the operator's field manager; the finalizer added — through
// a plain controller-runtime client with the operator's rate limits, with the operator's
// parallelism (concurrency workers for gateways, as many for peers, at the same time). It
// returns the time the writes took and how many there were.
func bareClientRun(b *testing.B, src string, gateways, peersPer int, kinds []schema.GroupVersionKind, concurrency int) (time.Duration, int64) {
	ctx := context.Background()
	dst := namespace(b)
	parallel(b, gateways, func(i int) []client.Object { return benchGateway(dst, i, peersPer, false) })

	// Read what the operator wrote (untimed), and the new namespace's gateways' UIDs.
	kidsOf := map[string][]*unstructured.Unstructured{} // gateway -> children
	for _, gvk := range uniqueKinds(kinds) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := env.Client.List(ctx, list, client.InNamespace(src), client.MatchingLabels{children.LabelManagedBy: children.ManagedBy}); err != nil {
			b.Fatal(err)
		}
		for i := range list.Items {
			u := &list.Items[i]
			refs := u.GetOwnerReferences()
			if len(refs) != 1 {
				b.Fatalf("%s %s has owners %v", gvk.Kind, u.GetName(), refs)
			}
			kidsOf[refs[0].Name] = append(kidsOf[refs[0].Name], u)
		}
	}
	var srcGWs, dstGWs vpnv1.VPNGatewayList
	var srcPeers vpnv1.VPNPeerList
	for _, l := range []struct {
		ns   string
		list client.ObjectList
	}{{src, &srcGWs}, {dst, &dstGWs}, {src, &srcPeers}} {
		if err := env.Client.List(ctx, l.list, client.InNamespace(l.ns)); err != nil {
			b.Fatal(err)
		}
	}
	status := map[string]vpnv1.VPNGatewayStatus{}
	for _, gw := range srcGWs.Items {
		status[gw.Name] = gw.Status
	}
	for _, gw := range dstGWs.Items {
		for _, u := range kidsOf[gw.Name] {
			cleanForApply(u, dst, gw.UID)
		}
	}

	var writes testenv.WriteCounter
	c, err := client.New(writes.Wrap(env.Config), client.Options{Scheme: operator.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	gwJobs := make(chan *vpnv1.VPNGateway, len(dstGWs.Items))
	for i := range dstGWs.Items {
		gwJobs <- &dstGWs.Items[i]
	}
	close(gwJobs)
	peerJobs := make(chan *vpnv1.VPNPeer, len(srcPeers.Items))
	for i := range srcPeers.Items {
		peerJobs <- &srcPeers.Items[i]
	}
	close(peerJobs)
	errs := make(chan error, 2*concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for gw := range gwJobs {
				if err := bareGateway(ctx, c, gw, kidsOf[gw.Name], status[gw.Name]); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for p := range peerJobs {
				if err := kube.ApplyStatus(ctx, c, vpnv1.GroupVersion.WithKind("VPNPeer"), dst, p.Name, controller.FieldOwner, &p.Status); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return took, writes.Count()
}

// bareGateway converges one gateway the way the operator's minimum does: finalizer, children,
// status.
func bareGateway(ctx context.Context, c client.Client, gw *vpnv1.VPNGateway, kids []*unstructured.Unstructured, st vpnv1.VPNGatewayStatus) error {
	patch := client.MergeFrom(gw.DeepCopy())
	controllerutil.AddFinalizer(gw, controller.FinalizerAddresses)
	if err := c.Patch(ctx, gw, patch); err != nil {
		return err
	}
	for _, u := range kids {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(controller.FieldOwner), client.ForceOwnership); err != nil {
			return err
		}
	}
	return kube.ApplyStatus(ctx, c, vpnv1.GroupVersion.WithKind("VPNGateway"), gw.Namespace, gw.Name, controller.FieldOwner, &st)
}

// cleanForApply turns an object read from the API server into what applying it elsewhere
// takes: no server-set metadata or status, another namespace, the owner's new UID.
func cleanForApply(u *unstructured.Unstructured, namespace string, owner types.UID) {
	for _, f := range []string{"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"} {
		unstructured.RemoveNestedField(u.Object, "metadata", f)
	}
	unstructured.RemoveNestedField(u.Object, "status")
	u.SetNamespace(namespace)
	refs := u.GetOwnerReferences()
	refs[0].UID = owner
	u.SetOwnerReferences(refs)
}

func uniqueKinds(kinds []schema.GroupVersionKind) []schema.GroupVersionKind {
	var out []schema.GroupVersionKind
	for _, k := range kinds {
		if !contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

func contains[T comparable](list []T, x T) bool {
	for _, y := range list {
		if x == y {
			return true
		}
	}
	return false
}

// diffKinds is now - then, kinds with no difference left out.
func diffKinds(now, then map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, n := range now {
		if d := n - then[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func sumKinds(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// parallel creates the objects make(i) returns for i in [0,n) with a few workers.
func parallel(b *testing.B, n int, objects func(i int) []client.Object) {
	var wg sync.WaitGroup
	jobs := make(chan int, n)
	for i := range n {
		jobs <- i
	}
	close(jobs)
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				for _, o := range objects(i) {
					if err := env.Client.Create(context.Background(), o); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
