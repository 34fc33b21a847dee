package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/operator"
	"github.com/bnerd/bnerd-vpn-operator/internal/testenv"
)

// BenchmarkControlPlane: 1,000 gateways × 10 peers (BENCH_GATEWAYS / BENCH_PEERS override)
// exist before the operator starts; it prints the time until every gateway is rendered and
// every peer has its Authorized condition, the API writes that took, and the operator's heap.
// Goals: ≤ 60 s and ≤ 256 MiB.
func BenchmarkControlPlane(b *testing.B) {
	gateways, peers := envInt("BENCH_GATEWAYS", 1000), envInt("BENCH_PEERS", 10)
	for range b.N {
		benchControlPlane(b, gateways, peers)
	}
}

func benchControlPlane(b *testing.B, gateways, peersPer int) {
	ctx := context.Background()
	ns := namespace(b)
	start := time.Now()
	parallel(b, gateways, func(i int) []client.Object {
		gw := ipsecGateway(ns, fmt.Sprintf("gw-%04d", i))
		gw.Spec.ReverseExposures = nil
		gw.Spec.Endpoint.HostNetwork.NodeName = fmt.Sprintf("node-%04d", i) // one gateway per node
		objs := []client.Object{gw}
		for j := range peersPer {
			name := fmt.Sprintf("gw-%04d-p%02d", i, j)
			objs = append(objs, pskSecret(ns, name),
				ipsecPeer(ns, name, gw.Name, []string{fmt.Sprintf("10.%d.%d.0/24", j, i%250)}, &vpnv1.Authorization{Exposures: []string{"api"}}))
		}
		return objs
	})
	b.Logf("created %d gateways and %d peers in %s", gateways, gateways*peersPer, time.Since(start).Round(time.Millisecond))

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	// Watch progress through an informer cache: listing 10,000 peers every poll would load the
	// API server more than the operator does.
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
	cfg := operatorConfig()
	cfg.Concurrency = envInt("BENCH_CONCURRENCY", cfg.Concurrency)
	cfg.Model.PoolCIDR = netip.MustParsePrefix("100.80.0.0/12") // 4,096 /24s (the default /16 holds 256)
	stop := startOperator(b, cfg, writes.Wrap(env.Config))
	poll(b, 10*time.Minute, 200*time.Millisecond, func() error {
		var gws vpnv1.VPNGatewayList
		if err := watcher.List(ctx, &gws, client.InNamespace(ns)); err != nil {
			return err
		}
		rendered := 0
		for _, gw := range gws.Items {
			if meta.IsStatusConditionTrue(gw.Status.Conditions, vpnv1.ConditionRendered) && gw.Status.ObservedGeneration == gw.Generation {
				rendered++
			}
		}
		var ps vpnv1.VPNPeerList
		if err := watcher.List(ctx, &ps, client.InNamespace(ns)); err != nil {
			return err
		}
		authorized := 0
		for _, p := range ps.Items {
			if c := meta.FindStatusCondition(p.Status.Conditions, vpnv1.ConditionAuthorized); c != nil && c.Status == metav1.ConditionTrue {
				authorized++
			}
		}
		if rendered < gateways || authorized < gateways*peersPer {
			return fmt.Errorf("%d/%d gateways rendered, %d/%d peers authorized", rendered, gateways, authorized, gateways*peersPer)
		}
		return nil
	})
	converge := time.Since(start)
	b.StopTimer()

	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	heap := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / (1 << 20)
	fmt.Printf("control plane: %d gateways x %d peers: converged in %s (goal <= 60s), %d API writes, operator heap %.0f MiB (goal <= 256 MiB)\n",
		gateways, peersPer, converge.Round(time.Millisecond), writes.Count(), heap)
	fmt.Printf("  writes by kind: %v\n", writes.ByKind())
	b.ReportMetric(converge.Seconds(), "s-converge")
	b.ReportMetric(float64(writes.Count()), "writes")
	b.ReportMetric(heap, "MiB-heap")
	stop()
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
