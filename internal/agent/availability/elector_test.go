package availability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		_ = env.Stop()
	}
	os.Exit(code)
}

// startEnv starts the API server once for the package's envtests.
func startEnv(t *testing.T) *testenv.Env {
	t.Helper()
	if testing.Short() {
		t.Skip("envtest: not in -short")
	}
	if env == nil {
		e, err := testenv.Start()
		if err != nil {
			t.Fatal(err)
		}
		env = e
	}
	return env
}

// fakeFence records whether it is installed.
type fakeFence struct{ installed atomic.Bool }

func (f *fakeFence) Install(context.Context, uint16) error { f.installed.Store(true); return nil }
func (f *fakeFence) Follow(context.Context, uint16) error  { return nil }
func (f *fakeFence) Remove(context.Context) error          { f.installed.Store(false); return nil }

// fakeDataplane counts the hooks.
type fakeDataplane struct{ takeOvers, stepDowns atomic.Int32 }

func (d *fakeDataplane) TakeOver(context.Context) error { d.takeOvers.Add(1); return nil }
func (d *fakeDataplane) StepDown(context.Context) error { d.stepDowns.Add(1); return nil }

// member is one pod of the pair: an Elector with its own API client (whose requests can be
// made to fail), its /availability server on its own loopback address, a fake fence and
// dataplane.
type member struct {
	e        *Elector
	fence    *fakeFence
	dp       *fakeDataplane
	healthy  atomic.Bool
	apiDown  atomic.Bool
	srv      *http.Server
	cancel   context.CancelFunc
	done     chan struct{}
	stopOnce sync.Once
}

// failingTransport answers every request with a refused connection while down is set, as a
// client pointed at a closed port would.
type failingTransport struct {
	next http.RoundTripper
	down *atomic.Bool
}

func (f failingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if f.down.Load() {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	}
	return f.next.RoundTrip(r)
}

func newMember(t *testing.T, cfg *rest.Config, ns, lease, name, addr string, port int) *member {
	t.Helper()
	return newMemberWith(t, cfg, ns, lease, name, addr, port, nil)
}

// newMemberWith is newMember with mod applied to the member before it starts.
func newMemberWith(t *testing.T, cfg *rest.Config, ns, lease, name, addr string, port int, mod func(*member)) *member {
	t.Helper()
	m := &member{fence: &fakeFence{}, dp: &fakeDataplane{}, done: make(chan struct{})}
	m.healthy.Store(true)
	c := rest.CopyConfig(cfg)
	c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return failingTransport{next: rt, down: &m.apiDown} }
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	m.e = &Elector{Leases: cs.CoordinationV1(), Namespace: ns, Lease: lease, Gateway: "gw",
		Identity: name, Address: addr, ProbePort: port, Fence: m.fence,
		Dataplane: func() any { return m.dp },
		Healthy:   func(context.Context) bool { return m.healthy.Load() },
	}
	if mod != nil {
		mod(m)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/availability", m.e)
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: time.Second}
	go func() { _ = m.srv.Serve(ln) }()
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	if err := m.e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(m.done)
		_ = m.e.Run(ctx)
	}()
	t.Cleanup(func() { m.kill() })
	return m
}

// kill ends the member as a dead node would: no renewals, no answers.
func (m *member) kill() {
	m.stopOnce.Do(func() {
		_ = m.srv.Close()
		m.cancel()
		<-m.done
	})
}

// stop ends the member as SIGTERM does: Run ends, Shutdown hands over, then the server goes.
func (m *member) stop() {
	m.stopOnce.Do(func() {
		m.cancel()
		<-m.done
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.e.Shutdown(ctx)
		_ = m.srv.Close()
	})
}

var leaseSeq atomic.Int32

// pair creates a Lease without holder and two members, and waits for one to be active.
func pair(t *testing.T) (active, standby *member, leases func() *coordinationv1.Lease) {
	t.Helper()
	e := startEnv(t)
	cs := kubernetes.NewForConfigOrDie(e.Config)
	name := fmt.Sprintf("gw-%d-active", leaseSeq.Add(1))
	d := int32(2)
	_, err := cs.CoordinationV1().Leases("default").Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       coordinationv1.LeaseSpec{LeaseDurationSeconds: &d},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	a := newMember(t, e.Config, "default", name, "pod-a", "127.0.0.2", port)
	b := newMember(t, e.Config, "default", name, "pod-b", "127.0.0.3", port)
	get := func() *coordinationv1.Lease {
		l, err := cs.CoordinationV1().Leases("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	waitFor(t, 5*time.Second, "one active, one standby", func() bool {
		return a.e.IsActive() != b.e.IsActive()
	})
	if a.e.IsActive() {
		active, standby = a, b
	} else {
		active, standby = b, a
	}
	if active.fence.installed.Load() || !standby.fence.installed.Load() {
		t.Fatalf("fences: active %v, standby %v", active.fence.installed.Load(), standby.fence.installed.Load())
	}
	if h := get().Spec.HolderIdentity; h == nil || *h != active.e.Identity {
		t.Fatalf("Lease holder %v, want %s", h, active.e.Identity)
	}
	// The active knows its standby once it probed (the members annotation gives its address).
	waitFor(t, 5*time.Second, "the active sees its standby", active.e.StandbyReady)
	return active, standby, get
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func waitFor(t *testing.T, timeout time.Duration, what string, f func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !f() {
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

func lastTakeover(t *testing.T, l *coordinationv1.Lease) Takeover {
	t.Helper()
	var tk Takeover
	if err := json.Unmarshal([]byte(l.Annotations[AnnotationLastTakeover]), &tk); err != nil {
		t.Fatalf("last-takeover %q: %v", l.Annotations[AnnotationLastTakeover], err)
	}
	return tk
}

func TestElectorInitialElectionAndHandover(t *testing.T) {
	active, standby, lease := pair(t)
	if tk := lastTakeover(t, lease()); tk.Reason != ReasonInitial || tk.To != active.e.Identity {
		t.Fatalf("last takeover %+v", tk)
	}
	if n := active.e.Takeovers()[ReasonInitial]; n != 1 {
		t.Fatalf("initial takeovers %d", n)
	}
	var members map[string]string
	if err := json.Unmarshal([]byte(lease().Annotations[AnnotationMembers]), &members); err != nil ||
		members["pod-a"] != "127.0.0.2" || members["pod-b"] != "127.0.0.3" {
		t.Fatalf("members %v (%v)", members, err)
	}

	// the standby is ready (joined) once the active answers its probes as its standby's
	waitFor(t, 3*time.Second, "the standby joined", standby.e.Joined)
	if !active.e.Joined() {
		t.Fatal("the active is not joined")
	}

	start := time.Now()
	active.stop()
	took := waitFor(t, 3*time.Second, "the standby active after the handover", standby.e.IsActive)
	t.Logf("handover: standby active %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	_ = took
	if !active.fence.installed.Load() || standby.fence.installed.Load() {
		t.Fatalf("fences after handover: old %v, new %v", active.fence.installed.Load(), standby.fence.installed.Load())
	}
	if active.dp.stepDowns.Load() != 1 || standby.dp.takeOvers.Load() != 1 {
		t.Fatalf("hooks: old stepped down %d, new took over %d", active.dp.stepDowns.Load(), standby.dp.takeOvers.Load())
	}
	l := lease()
	if tk := lastTakeover(t, l); tk.Reason != ReasonHandedOver || tk.From != active.e.Identity || tk.To != standby.e.Identity {
		t.Fatalf("last takeover %+v", tk)
	}
	// The new active renews.
	time.Sleep(time.Second)
	if l2 := lease(); *l2.Spec.HolderIdentity != standby.e.Identity || !l2.Spec.RenewTime.After(l.Spec.RenewTime.Time) {
		t.Fatalf("the new active does not renew: %v %v", l2.Spec.HolderIdentity, l2.Spec.RenewTime)
	}
}

func TestElectorTakeoverWhenActiveDies(t *testing.T) {
	active, standby, lease := pair(t)
	start := time.Now()
	active.kill()
	took := waitFor(t, 5*time.Second, "the standby taking over", standby.e.IsActive)
	t.Logf("takeover %s after the active died", took.Round(time.Millisecond))
	if took < 1500*time.Millisecond {
		t.Fatalf("took over after %s, before the Lease could expire", took)
	}
	if tk := lastTakeover(t, lease()); tk.Reason != ReasonActiveGone || tk.From != active.e.Identity || tk.OutageMillis < 1000 {
		t.Fatalf("last takeover %+v", tk)
	}
	if standby.fence.installed.Load() || standby.dp.takeOvers.Load() != 1 {
		t.Fatalf("new active: fenced %v, takeovers %d", standby.fence.installed.Load(), standby.dp.takeOvers.Load())
	}
	_ = start
}

func TestElectorTakeoverWhenActiveUnhealthy(t *testing.T) {
	active, standby, lease := pair(t)
	active.healthy.Store(false)
	waitFor(t, 3*time.Second, "the standby taking over", standby.e.IsActive)
	waitFor(t, 3*time.Second, "the old active stepping down", func() bool { return !active.e.IsActive() })
	if tk := lastTakeover(t, lease()); tk.Reason != ReasonActiveUnhealthy {
		t.Fatalf("last takeover %+v", tk)
	}
	if !active.fence.installed.Load() || active.dp.stepDowns.Load() != 1 {
		t.Fatalf("old active: fenced %v, step-downs %d", active.fence.installed.Load(), active.dp.stepDowns.Load())
	}
}

// The active cannot reach the API (its Lease is not renewed) but its standby probes it: no
// takeover, and the active does not step down.
func TestElectorNoTakeoverWhenOnlyActiveLosesAPI(t *testing.T) {
	active, standby, lease := pair(t)
	before := lease()
	active.apiDown.Store(true)
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		if !active.e.IsActive() || standby.e.IsActive() {
			t.Fatalf("roles changed: active %v, standby %v", active.e.IsActive(), standby.e.IsActive())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if l := lease(); !l.Spec.RenewTime.Equal(before.Spec.RenewTime) && l.Spec.RenewTime.Sub(before.Spec.RenewTime.Time) > time.Second {
		t.Fatalf("the Lease was renewed while the active had no API: %v -> %v", before.Spec.RenewTime, l.Spec.RenewTime)
	}
	// The API back: the active renews again, still the same pair.
	active.apiDown.Store(false)
	waitFor(t, 3*time.Second, "renewals again", func() bool {
		return lease().Spec.RenewTime.After(before.Spec.RenewTime.Add(5 * time.Second))
	})
	if !active.e.IsActive() || standby.e.IsActive() || active.dp.stepDowns.Load() != 0 {
		t.Fatal("roles changed after the API came back")
	}
}

// The standby goes (SIGTERM: a rollout replaces it, its node is drained) and tells the active:
// the active forgets it at once, and an API outage longer than the Lease's right after — the
// moment of a rollout — does not make it step down as isolated, which would leave no pod
// active. (A standby that vanishes without a word is still taken for one cut off with the
// active, which then steps down: Decide's isolation rows.)
func TestElectorStandbyLeavesActiveStays(t *testing.T) {
	active, standby, _ := pair(t)
	standby.stop()
	waitFor(t, time.Second, "the active forgets its standby", func() bool { return !active.e.StandbyReady() })
	if _, heard := active.e.inputsNoJump().Heard[standby.e.Identity]; heard {
		t.Fatalf("the active still has the standby's probes")
	}
	active.apiDown.Store(true)
	deadline := time.Now().Add(2*active.e.Timing.WithDefaults().LeaseDuration + time.Second)
	for time.Now().Before(deadline) {
		if !active.e.IsActive() {
			t.Fatalf("the active stepped down without its API after its standby left")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := active.dp.stepDowns.Load(); n != 0 {
		t.Fatalf("%d step-downs", n)
	}
}

// Both lose the API: nothing changes.
func TestElectorAPIOutageForBoth(t *testing.T) {
	active, standby, _ := pair(t)
	active.apiDown.Store(true)
	standby.apiDown.Store(true)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if !active.e.IsActive() || standby.e.IsActive() {
			t.Fatalf("roles changed: active %v, standby %v", active.e.IsActive(), standby.e.IsActive())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The agent restarts in the active pod (its dataplane runs on): it resumes the role, reporting
// itself healthy while it loads its configuration, and the standby does not take over.
func TestElectorAgentRestartInActivePod(t *testing.T) {
	active, standby, lease := pair(t)
	before := lastTakeover(t, lease())
	active.kill()
	time.Sleep(300 * time.Millisecond)
	restarted := newMemberWith(t, env.Config, "default", active.e.Lease, active.e.Identity, active.e.Address, active.e.ProbePort, func(m *member) {
		// The configuration loads 1.5 s after the start.
		start := time.Now()
		m.e.Healthy = func(context.Context) bool { return time.Since(start) > 1500*time.Millisecond }
	})
	if !restarted.e.IsActive() || restarted.fence.installed.Load() {
		t.Fatalf("restarted agent: active %v, fenced %v", restarted.e.IsActive(), restarted.fence.installed.Load())
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if standby.e.IsActive() || !restarted.e.IsActive() {
			t.Fatalf("roles changed: restarted %v, standby %v", restarted.e.IsActive(), standby.e.IsActive())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if tk := lastTakeover(t, lease()); tk != before || restarted.dp.takeOvers.Load() != 0 {
		t.Fatalf("last takeover %+v (was %+v), TakeOver hooks %d", tk, before, restarted.dp.takeOvers.Load())
	}
	waitFor(t, 3*time.Second, "the standby probing the restarted agent", restarted.e.StandbyReady)
}

// fakeAnnouncer records whether the address is held, and the order of fence and address.
type fakeAnnouncer struct {
	held  atomic.Bool
	fence *fakeFence
	// fencedAtClaim: the fence was still installed when the address was claimed.
	fencedAtClaim atomic.Bool
}

func (a *fakeAnnouncer) Claim(context.Context) error {
	a.fencedAtClaim.Store(a.fence.installed.Load())
	a.held.Store(true)
	return nil
}
func (a *fakeAnnouncer) Release(context.Context) error { a.held.Store(false); return nil }
func (a *fakeAnnouncer) Held() (bool, error)           { return a.held.Load(), nil }

// With an Announcer (a host-network gateway's VIP) the address follows the role: held by the
// active only, claimed after its fence went, claimed again when it went missing, released by
// a pod that hands over.
func TestElectorAnnouncer(t *testing.T) {
	e := startEnv(t)
	cs := kubernetes.NewForConfigOrDie(e.Config)
	name := fmt.Sprintf("gw-%d-active", leaseSeq.Add(1))
	d := int32(2)
	if _, err := cs.CoordinationV1().Leases("default").Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       coordinationv1.LeaseSpec{LeaseDurationSeconds: &d},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ann := map[string]*fakeAnnouncer{}
	withAnnouncer := func(m *member) {
		a := &fakeAnnouncer{fence: m.fence}
		a.held.Store(true) // left on the node by an earlier pod
		ann[m.e.Identity] = a
		m.e.Announcer = a
	}
	port := freePort(t)
	a := newMemberWith(t, e.Config, "default", name, "pod-a", "127.0.0.2", port, withAnnouncer)
	b := newMemberWith(t, e.Config, "default", name, "pod-b", "127.0.0.3", port, withAnnouncer)
	waitFor(t, 5*time.Second, "one active", func() bool { return a.e.IsActive() != b.e.IsActive() })
	active, standby := a, b
	if b.e.IsActive() {
		active, standby = b, a
	}
	waitFor(t, 2*time.Second, "the active holds the address", ann[active.e.Identity].held.Load)
	if ann[standby.e.Identity].held.Load() {
		t.Fatal("the standby holds the address")
	}
	if ann[active.e.Identity].fencedAtClaim.Load() {
		t.Fatal("the address was claimed while the fence was still installed")
	}
	// The address gone from the active's node (a claim that failed, someone removed it): the
	// active claims it again.
	ann[active.e.Identity].held.Store(false)
	waitFor(t, 3*time.Second, "the active claiming its address again", ann[active.e.Identity].held.Load)
	waitFor(t, 5*time.Second, "the active sees its standby", active.e.StandbyReady)
	active.stop()
	waitFor(t, 3*time.Second, "the standby active after the handover", standby.e.IsActive)
	waitFor(t, 2*time.Second, "the new active holds the address", ann[standby.e.Identity].held.Load)
	if ann[active.e.Identity].held.Load() {
		t.Fatal("the pod that handed over still holds the address")
	}
}
