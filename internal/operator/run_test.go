package operator_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/operator"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testenv"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/wait"
)

// env is one real kube-apiserver + etcd for the package's tests.
var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(e *testenv.Env) { env = e }))
}

// The operator is started while its API server is unreachable (nothing listens on the port its
// configuration names): it neither exits nor fails, its health endpoint answers from the start
// and /readyz says why it is not ready, retrying with growing (capped) waits. Once the port
// leads to the API server it becomes ready and reconciles.
func TestRunWaitsForTheAPIServer(t *testing.T) {
	ns := namespace(t, "wait")
	// A port nothing listens on, that the proxy to the API server takes later.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	r := newRunner(t, ns, hostConfig(addr), false)
	run := start(t, r)

	// Waiting: /healthz answers 200 (the kubelet must not kill a waiting operator), /readyz 503
	// with the reason, and the attempts go on.
	poll(t, 30*time.Second, func() error {
		if err := run.exited(); err != nil {
			return err
		}
		if s := r.Status(); s.Attempts < 4 {
			return fmt.Errorf("attempts so far: %d (%s)", s.Attempts, s)
		}
		return nil
	})
	if code, body := get(t, run.health, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while waiting: %d %q", code, body)
	}
	code, body := get(t, run.health, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, string(operator.PhaseWaitingForAPIServer)) ||
		!strings.Contains(body, "connection refused") {
		t.Errorf("/readyz while waiting: %d %q, want 503 naming the phase and the error", code, body)
	}
	t.Logf("/readyz while waiting: %s", strings.TrimSpace(body))
	s1 := r.Status()

	// The API server appears on that port.
	p := listenProxy(t, addr, env.Config.Host)
	p.set(true)
	up := time.Now()
	gw := createGateway(t, ns, "gw")
	poll(t, 60*time.Second, func() error {
		if err := run.exited(); err != nil {
			return err
		}
		if code, body := get(t, run.health, "/readyz"); code != http.StatusOK {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		return reconciled(gw)
	})
	t.Logf("waited through %d attempts (backoff capped at %s); ready and reconciling %s after the API server appeared",
		s1.Attempts, r.MaxBackoff, time.Since(up).Round(time.Millisecond))
	if s := r.Status(); !s.Leader || s.Restarts != 0 {
		t.Errorf("status %+v: want the leader, no restarts", s)
	}
	run.stop(t)
}

// Two operators elect one leader with the shipped settings (30 s / 20 s / 5 s). The leader is
// stopped as the kubelet stops a pod (its context ends): it releases the Lease after its
// reconcilers returned, and the standby takes over and reconciles; the takeover time is logged.
func TestStandbyTakesOverFromAStoppedLeader(t *testing.T) {
	ns := namespace(t, "takeover")
	a := newRunner(t, ns, env.Config, true)
	b := newRunner(t, ns, env.Config, true)
	runA := start(t, a)
	waitLeader(t, ns, a, 60*time.Second)
	runB := start(t, b)
	poll(t, 60*time.Second, func() error {
		if s := b.Status(); !s.Ready() || s.Leader {
			return fmt.Errorf("b: %s", s)
		}
		return nil
	})
	code, body := get(t, runB.health, "/readyz")
	if code != http.StatusOK || !strings.Contains(body, "standby") {
		t.Errorf("the standby's /readyz: %d %q", code, body)
	}
	if !a.Status().Leader {
		t.Fatalf("a lost the lead to a standby: %s", a.Status())
	}

	stopped := time.Now()
	runA.stop(t)
	stopTook := time.Since(stopped)
	waitLeader(t, ns, b, 60*time.Second)
	gw := createGateway(t, ns, "after-takeover")
	poll(t, 30*time.Second, func() error { return reconciled(gw) })
	t.Logf("leader stopped (took %s) -> standby leads: %s; -> reconciled a new gateway: %s (retry period %s)",
		stopTook.Round(time.Millisecond), b.leadingSince().Sub(stopped).Round(time.Millisecond),
		time.Since(stopped).Round(time.Millisecond), operator.DefaultRetryPeriod)
	if s := b.Status(); s.Restarts != 0 {
		t.Errorf("the standby restarted its manager: %s", s)
	}
}

// The leader is cut off from the API server (its connections dropped, new ones refused) and
// does not come back in time: the standby takes the Lease once it expires and reconciles. The
// old leader does not exit: its manager stops on the lost Lease, it rebuilds one in-process and
// waits for the API server, saying so on /readyz; when it is reachable again it is a ready
// standby. Short lease settings keep the test quick; times are logged.
func TestCutOffLeaderIsReplacedAndRejoinsAsStandby(t *testing.T) {
	ns := namespace(t, "cutoff")
	pa := newProxy(t, env.Config.Host)
	pa.set(true)
	a := newRunner(t, ns, hostConfig(pa.addr()), true)
	b := newRunner(t, ns, env.Config, true)
	short(a, b)
	runA := start(t, a)
	waitLeader(t, ns, a, 60*time.Second)
	start(t, b)
	poll(t, 60*time.Second, func() error {
		if s := b.Status(); !s.Ready() || s.Leader {
			return fmt.Errorf("b: %s", s)
		}
		return nil
	})

	cut := time.Now()
	pa.set(false)
	gw := createGateway(t, ns, "during-cut")
	waitLeader(t, ns, b, 60*time.Second)
	took := b.leadingSince().Sub(cut)
	poll(t, 30*time.Second, func() error { return reconciled(gw) })
	// The old leader: its manager stopped, it is being replaced, the process runs on.
	poll(t, 60*time.Second, func() error {
		if err := runA.exited(); err != nil {
			return err
		}
		s := a.Status()
		if s.Restarts < 1 || s.Ready() || s.Leader {
			return fmt.Errorf("a: %s", s)
		}
		return nil
	})
	code, body := get(t, runA.health, "/readyz")
	if code != http.StatusServiceUnavailable {
		t.Errorf("the cut-off operator's /readyz: %d %q", code, body)
	}
	t.Logf("the cut-off operator's /readyz: %s", strings.TrimSpace(body))
	if code, body := get(t, runA.health, "/healthz"); code != http.StatusOK {
		t.Errorf("the cut-off operator's /healthz: %d %q", code, body)
	}

	pa.set(true)
	back := time.Now()
	poll(t, 60*time.Second, func() error {
		if err := runA.exited(); err != nil {
			return err
		}
		if s := a.Status(); !s.Ready() || s.Leader {
			return fmt.Errorf("a: %s", s)
		}
		return nil
	})
	t.Logf("leader cut off -> standby leads: %s (lease %s, renew deadline %s, retry %s); cut-off operator ready as a standby %s after the API came back, restarts %d",
		took.Round(time.Millisecond), a.Config.LeaseDuration, a.Config.RenewDeadline, a.Config.RetryPeriod,
		time.Since(back).Round(time.Millisecond), a.Status().Restarts)
	if !b.Status().Leader {
		t.Errorf("b lost the lead: %s", b.Status())
	}
}

// A single operator loses the API server for longer than its lease: its manager stops on the
// lost Lease and it waits in-process. A change made during the outage is reconciled soon after
// the API server is back: the rebuilt manager holds the same identity and renews the Lease that
// still names it at once, instead of waiting for it to expire. The time is logged.
func TestLostLeaseIsRenewedWhenTheAPIServerReturns(t *testing.T) {
	ns := namespace(t, "outage")
	p := newProxy(t, env.Config.Host)
	p.set(true)
	r := newRunner(t, ns, hostConfig(p.addr()), true)
	short(r)
	run := start(t, r)
	waitLeader(t, ns, r, 60*time.Second)
	id := r.Status().Identity

	p.set(false)
	down := time.Now()
	poll(t, 60*time.Second, func() error {
		if err := run.exited(); err != nil {
			return err
		}
		if s := r.Status(); s.Restarts < 1 || s.Phase != operator.PhaseWaitingForAPIServer {
			return fmt.Errorf("%s", s)
		}
		return nil
	})
	lost := time.Since(down)
	// Stay away until the Lease has expired (as another replica would see it).
	poll(t, 60*time.Second, func() error {
		if d := time.Since(down); d < 2*r.Config.LeaseDuration {
			return fmt.Errorf("down for %s", d)
		}
		return nil
	})
	gw := createGateway(t, ns, "during-outage")

	p.set(true)
	back := time.Now()
	poll(t, 60*time.Second, func() error {
		if err := run.exited(); err != nil {
			return err
		}
		return reconciled(gw)
	})
	t.Logf("API server away %s (lease lost after %s) -> the change made meanwhile reconciled %s after it returned, restarts %d",
		back.Sub(down).Round(time.Millisecond), lost.Round(time.Millisecond), time.Since(back).Round(time.Millisecond), r.Status().Restarts)
	if s := r.Status(); !s.Leader || s.Identity != id {
		t.Errorf("status %+v, want the leader with identity %s", s, id)
	}
	var lease coordinationv1.Lease
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: leaseName(ns)}, &lease); err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != id {
		t.Errorf("lease holder %v, want %s", lease.Spec.HolderIdentity, id)
	}
	run.stop(t)
}

// ---------------------------------------------------------------------------------------------

// testRunner is a Runner with the test's bookkeeping.
type testRunner struct {
	*operator.Runner
	name    string
	mu      sync.Mutex
	leadsAt time.Time
}

func (r *testRunner) leadingSince() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leadsAt
}

var runners atomic.Int32

// newRunner is an operator against restCfg electing in ns (when elect).
func newRunner(t *testing.T, ns string, restCfg *rest.Config, elect bool) *testRunner {
	t.Helper()
	cfg := operator.Config{
		Options: controller.Options{
			Model:  model.Config{PoolCIDR: model.DefaultPoolCIDR, InternalSourceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
			Render: children.Options{AgentImage: "agent:test", StrongSwanImage: "strongswan:test", ImagePullPolicy: corev1.PullNever},
		},
		Concurrency:             2,
		MetricsAddr:             "0",
		HealthAddr:              "127.0.0.1:0",
		LeaderElection:          elect,
		LeaderElectionNamespace: ns,
		LeaderElectionID:        leaseName(ns),
	}
	n := runners.Add(1)
	name := fmt.Sprintf("op%d", n)
	return &testRunner{name: name, Runner: &operator.Runner{
		RestConfig: restCfg, Config: cfg,
		Log:        ctrl.Log.WithName(name),
		MaxBackoff: 2 * time.Second,
	}}
}

// short gives the runners lease settings of a few seconds.
func short(rs ...*testRunner) {
	for _, r := range rs {
		r.Config.LeaseDuration, r.Config.RenewDeadline, r.Config.RetryPeriod = 4*time.Second, 3*time.Second, 500*time.Millisecond
	}
}

func leaseName(ns string) string { return "lease-" + ns }

// running is a started Runner.
type running struct {
	health string
	cancel context.CancelFunc
	done   chan error
	err    atomic.Pointer[error]
	once   sync.Once
}

// exited is an error once Run has returned (it must not while the test runs it).
func (r *running) exited() error {
	select {
	case err := <-r.done:
		r.err.Store(&err)
	default:
	}
	if p := r.err.Load(); p != nil {
		return fmt.Errorf("Run returned early: %v", *p)
	}
	return nil
}

// stop ends Run and checks that it returned without an error.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		if p := r.err.Load(); p != nil {
			t.Errorf("Run had returned early: %v", *p)
			return
		}
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("Run did not return within 60s of its context's end")
		}
	})
}

// start runs r until the test ends.
func start(t *testing.T, r *testRunner) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	run := &running{cancel: cancel, done: make(chan error, 1)}
	listening := make(chan string, 1)
	r.Listening = func(health, _ string) { listening <- health }
	go func() { run.done <- r.Run(ctx) }()
	select {
	case run.health = <-listening:
	case err := <-run.done:
		cancel()
		t.Fatalf("%s: Run returned before listening: %v", r.name, err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatalf("%s: not listening within 10s", r.name)
	}
	// Record when it leads (polled: the Status says).
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		was := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			l := r.Status().Leader
			if l && !was {
				r.mu.Lock()
				r.leadsAt = time.Now()
				r.mu.Unlock()
			}
			was = l
		}
	}()
	t.Cleanup(func() { run.stop(t) })
	return run
}

// waitLeader waits until r leads and the Lease names it.
func waitLeader(t *testing.T, ns string, r *testRunner, timeout time.Duration) {
	t.Helper()
	poll(t, timeout, func() error {
		s := r.Status()
		if !s.Leader {
			return fmt.Errorf("%s: %s", r.name, s)
		}
		var lease coordinationv1.Lease
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: leaseName(ns)}, &lease); err != nil {
			return err
		}
		if h := lease.Spec.HolderIdentity; h == nil || *h != s.Identity {
			return fmt.Errorf("lease holder %v, want %s", h, s.Identity)
		}
		return nil
	})
}

// get does a GET on a health listener.
func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s%s: %v", addr, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// hostConfig is env's configuration with the API server at addr (a proxy to it).
func hostConfig(addr string) *rest.Config {
	c := rest.CopyConfig(env.Config)
	c.Host = "https://" + addr
	return c
}

var nsCounter atomic.Int32

func namespace(t *testing.T, base string) string {
	t.Helper()
	name := fmt.Sprintf("run-%s-%d-%d", base, os.Getpid()%10000, nsCounter.Add(1))
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-in first-out: this one runs after the test's operators stopped.
	t.Cleanup(func() {
		ctx := context.Background()
		var list vpnv1.VPNGatewayList
		_ = env.Client.List(ctx, &list, client.InNamespace(name))
		for i := range list.Items {
			gw := &list.Items[i]
			patch := client.MergeFrom(gw.DeepCopy())
			gw.Finalizers = nil
			_ = env.Client.Patch(ctx, gw, patch)
		}
		_ = env.Client.DeleteAllOf(ctx, &vpnv1.VPNGateway{}, client.InNamespace(name))
	})
	return name
}

// createGateway creates a host-network IPsec gateway (the operator reconciles it without a node:
// its status says what is missing).
func createGateway(t *testing.T, ns, name string) *vpnv1.VPNGateway {
	t.Helper()
	gw := &vpnv1.VPNGateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: vpnv1.VPNGatewaySpec{
			Protocol: vpnv1.ProtocolIPsec,
			Endpoint: vpnv1.Endpoint{HostNetwork: &vpnv1.HostNetworkEndpoint{NodeName: "node-1", Address: "198.51.100.10"}},
			Exposures: []vpnv1.Exposure{
				{Name: "api", Target: vpnv1.ExposureTarget{Address: "192.0.2.10", Ports: vpnv1.Ports(vpnv1.PortSpec{Port: 443})}},
			},
		},
	}
	if err := env.Client.Create(context.Background(), gw); err != nil {
		t.Fatal(err)
	}
	return gw
}

// reconciled is nil once the operator has written the gateway's status for its generation.
func reconciled(gw *vpnv1.VPNGateway) error {
	var cur vpnv1.VPNGateway
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(gw), &cur); err != nil {
		return err
	}
	if cur.Status.ObservedGeneration != cur.Generation || len(cur.Status.Conditions) == 0 {
		return fmt.Errorf("gateway %s not reconciled: observed generation %d of %d", gw.Name, cur.Status.ObservedGeneration, cur.Generation)
	}
	return nil
}

// poll calls cond until it returns nil or timeout passes, then fails with its last error.
func poll(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	wait.For(t, "", timeout, cond)
}

// ---------------------------------------------------------------------------------------------

// proxy is a TCP proxy to the API server that can be cut off: while down it drops its
// connections and closes new ones at once.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	up     bool
	conns  map[net.Conn]struct{}
}

// newProxy listens on a free local port.
func newProxy(t *testing.T, target string) *proxy {
	return listenProxy(t, "127.0.0.1:0", target)
}

// listenProxy listens on addr and forwards to target (a host:port or URL), down at first.
func listenProxy(t *testing.T, addr, target string) *proxy {
	t.Helper()
	if u, err := url.Parse(target); err == nil && u.Host != "" {
		target = u.Host
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.set(false) })
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

// set brings the proxy up or down; down drops every open connection.
func (p *proxy) set(up bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = up
	if !up {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

func (p *proxy) forward(c net.Conn) {
	p.mu.Lock()
	if !p.up {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if !p.up {
		p.mu.Unlock()
		c.Close()
		s.Close()
		return
	}
	p.conns[s] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done
	c.Close()
	s.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}
