package operator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/version"
)

// Why a supervisor around controller-runtime's manager, and not its hooks.
//
// A manager is built once and started once. Building it needs the API server (the REST
// mappings of the cached types), and it stops for good when it loses its Lease: its
// OnStoppedLeading sends "leader election lost" and Start returns, without waiting for the
// reconcilers (graceful shutdown is skipped). controller-runtime expects the process to exit
// then; in a pod the kubelet restarts it, and after a few such exits during an API outage the
// operator sits in CrashLoopBackOff for minutes after the API is back. The manager's hooks
// cannot avoid that: OnStoppedLeading only runs before the same exit, and
// LeaderElectionReleaseOnCancel only covers a stop we asked for (it is set: a stopped leader hands
// over at once). So Run keeps the process and replaces the manager:
//
//   - it serves /healthz and /readyz (and /metrics) itself, before anything touches the API, for
//     the life of the process: the kubelet sees a live process that says why it is not ready
//     instead of a dead one;
//   - it waits for the API server — a discovery request for vpn.bnerd.net/v1alpha1, so it also
//     waits for the CRDs — with capped exponential backoff, then builds a manager (retried the
//     same way when the REST mapping fails);
//   - when a manager stops by itself (lost Lease, caches that never synced, a runnable's error),
//     it builds a new one after a backoff capped at a few seconds. The new manager elects with
//     the same identity (fixed once per process), so when nobody else took the Lease meanwhile it
//     renews it at once instead of waiting for it to expire; when a standby took it, the new
//     manager is the standby. A manager that lost its Lease has cancelled its reconcilers' context,
//     so their API writes fail; and a rebuilt manager reconciles only once it holds the Lease again.
//
// Only a stop of ctx (SIGTERM) or an invalid configuration ends Run. (Building a manager takes
// no context: against an API server that accepts connections but is frozen, it waits until the
// server answers — still waiting, never exiting, with /readyz saying so.)

// Phase is where Run is.
type Phase string

// Phases.
const (
	// PhaseWaitingForAPIServer: the API server is not reachable (or does not serve the CRDs yet),
	// or the manager could not be built against it.
	PhaseWaitingForAPIServer Phase = "WaitingForAPIServer"
	// PhaseStarting: a manager runs and its caches are syncing.
	PhaseStarting Phase = "Starting"
	// PhaseRunning: the manager's caches are synced; it reconciles when it leads.
	PhaseRunning Phase = "Running"
	// PhaseRestarting: the manager stopped by itself (lost Lease, ...) and is being replaced.
	PhaseRestarting Phase = "Restarting"
	// PhaseStopped: Run returned.
	PhaseStopped Phase = "Stopped"
)

// Status is what Run reports on /readyz and /healthz.
type Status struct {
	Phase Phase
	// Reason is why Run is not running a manager (the last error), empty when it is.
	Reason string
	// Since is when the phase began.
	Since time.Time
	// Attempts is the number of consecutive failed attempts to reach the API server or build a
	// manager; NextAttempt is when the next one is due.
	Attempts    int
	NextAttempt time.Time
	// Leader: the running manager holds the Lease (always, without leader election).
	Leader bool
	// Restarts is the number of managers that stopped by themselves and were replaced.
	Restarts int
	// Identity in the Lease ("" without leader election).
	Identity string
}

// Ready is whether a manager runs with synced caches (a standby is ready too: it takes over
// without a restart).
func (s Status) Ready() bool { return s.Phase == PhaseRunning }

// String is the one-line explanation /readyz and the logs give.
func (s Status) String() string {
	role := ""
	if s.Phase == PhaseRunning || s.Phase == PhaseStarting {
		role = ", standby"
		if s.Leader {
			role = ", leader"
		}
	}
	out := fmt.Sprintf("%s%s since %s", s.Phase, role, s.Since.UTC().Format(time.RFC3339))
	if s.Reason != "" {
		out += ": " + s.Reason
	}
	if !s.NextAttempt.IsZero() && s.Phase != PhaseRunning && s.Phase != PhaseStarting {
		out += fmt.Sprintf(" (attempt %d, next in %s)", s.Attempts, max(time.Until(s.NextAttempt), 0).Round(100*time.Millisecond))
	}
	return out
}

// Runner runs the operator: see the comment above Phase. The zero value of each field but
// RestConfig and Config is a sensible default.
type Runner struct {
	RestConfig *rest.Config
	Config     Config
	Log        logr.Logger
	// MinBackoff and MaxBackoff bound the wait between two attempts (250 ms, 5 s): the wait
	// doubles after each failure up to MaxBackoff, and starts over once a manager has run for
	// MaxBackoff×2 with synced caches.
	MinBackoff, MaxBackoff time.Duration
	// ProbeTimeout bounds one request to the API server while waiting for it (5 s).
	ProbeTimeout time.Duration
	// Listening, when set, is called with the health and metrics listeners' addresses once
	// they listen ("" when disabled) — before the API server is contacted.
	Listening func(health, metrics string)

	mu     sync.Mutex
	status Status
}

// Run runs the operator until ctx ends (see Runner).
func Run(ctx context.Context, restCfg *rest.Config, cfg Config) error {
	return (&Runner{RestConfig: restCfg, Config: cfg, Log: ctrl.Log.WithName("operator")}).Run(ctx)
}

var restarts = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "bnerd_vpn_operator_manager_restarts_total",
	Help: "Managers that stopped by themselves (lost leader lease, caches that did not sync) and were replaced in-process.",
})

// RegisterMetrics adds the operator's own metrics to reg: the gateways' readiness
// (controller.RegisterMetrics), the in-process manager restarts and bnerd_vpn_build_info. Run
// registers them into controller-runtime's registry (what /metrics serves) before it listens;
// registering them again is harmless.
func RegisterMetrics(reg prometheus.Registerer) error {
	if err := controller.RegisterMetrics(reg); err != nil {
		return err
	}
	for _, c := range []prometheus.Collector{restarts, version.NewBuildInfo()} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return err
			}
		}
	}
	return nil
}

// Status is the current status.
func (r *Runner) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

func (r *Runner) update(f func(*Status)) {
	r.mu.Lock()
	before := r.status
	f(&r.status)
	if r.status.Phase != before.Phase {
		r.status.Since = time.Now()
	}
	after := r.status
	r.mu.Unlock()
	if after.Phase != before.Phase && (after.Phase == PhaseStarting || after.Phase == PhaseRunning) {
		r.Log.Info("operator "+string(after.Phase), "restarts", after.Restarts)
	}
}

// Run runs the operator until ctx ends. It returns an error only for an invalid configuration
// or listeners it cannot open; everything that involves the API server is waited for and retried.
func (r *Runner) Run(ctx context.Context) error {
	if r.Log.GetSink() == nil {
		r.Log = logr.Discard()
	}
	minB, maxB := r.MinBackoff, r.MaxBackoff
	if minB <= 0 {
		minB = 250 * time.Millisecond
	}
	if maxB < minB {
		maxB = max(5*time.Second, minB)
	}
	probeTimeout := r.ProbeTimeout
	if probeTimeout <= 0 {
		probeTimeout = 5 * time.Second
	}
	cfg := r.Config
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := RegisterMetrics(ctrlmetrics.Registry); err != nil {
		return err
	}
	if cfg.LeaderElection && cfg.LeaderElectionIdentity == "" {
		cfg.LeaderElectionIdentity = NewIdentity()
	}
	// The managers serve neither health nor metrics: Run does, for the process's life.
	healthAddr, metricsAddr := cfg.HealthAddr, cfg.MetricsAddr
	cfg.HealthAddr, cfg.MetricsAddr = "0", "0"
	// Managers are built more than once in this process, with the same controller names.
	cfg.SkipControllerNameValidation = true

	r.update(func(s *Status) {
		*s = Status{Phase: PhaseWaitingForAPIServer, Reason: "not contacted yet", Identity: cfg.LeaderElectionIdentity}
	})
	defer r.update(func(s *Status) { s.Phase, s.Reason, s.Leader = PhaseStopped, "stopped", false })

	var servers []*http.Server
	defer func() {
		for _, s := range servers {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = s.Shutdown(sctx)
			cancel()
		}
	}()
	serve := func(addr string, h http.Handler) (string, error) {
		if addr == "" || addr == "0" {
			return "", nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return "", err
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, srv)
		go func() { _ = srv.Serve(ln) }()
		return ln.Addr().String(), nil
	}
	ha, err := serve(healthAddr, r.HealthHandler())
	if err != nil {
		return fmt.Errorf("--health-probe-bind-address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(ctrlmetrics.Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	ma, err := serve(metricsAddr, mux)
	if err != nil {
		return fmt.Errorf("--metrics-bind-address: %w", err)
	}
	if r.Listening != nil {
		r.Listening(ha, ma)
	}

	probe, err := newAPIProbe(r.RestConfig, probeTimeout)
	if err != nil {
		return err
	}
	backoff := minB
	// wait waits out the backoff after a failure, reporting it; false when ctx ended.
	wait := func(phase Phase, reason error) bool {
		d := backoff
		backoff = min(backoff*2, maxB)
		var attempts int
		r.update(func(s *Status) {
			s.Phase, s.Reason, s.Leader = phase, reason.Error(), false
			s.Attempts++
			s.NextAttempt = time.Now().Add(d)
			attempts = s.Attempts
		})
		r.Log.Info("operator "+string(phase), "reason", reason.Error(), "attempt", attempts, "retryIn", d.String())
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}

	for ctx.Err() == nil {
		if err := probe.check(ctx); err != nil {
			if !wait(PhaseWaitingForAPIServer, err) {
				break
			}
			continue
		}
		r.update(func(s *Status) {
			s.Phase, s.Reason, s.NextAttempt = PhaseWaitingForAPIServer, "the API server answers; building the manager (REST mappings)", time.Time{}
		})
		mgr, err := NewManager(ctx, r.RestConfig, cfg)
		if err != nil {
			if !wait(PhaseWaitingForAPIServer, fmt.Errorf("building the manager: %w", err)) {
				break
			}
			continue
		}
		r.update(func(s *Status) { s.Phase, s.Reason, s.Attempts, s.NextAttempt = PhaseStarting, "", 0, time.Time{} })
		ran, err := r.runManager(ctx, mgr)
		if ctx.Err() != nil {
			if err != nil {
				r.Log.Error(err, "the manager stopped with an error")
			}
			break
		}
		if err == nil {
			err = errors.New("the manager stopped without an error")
		}
		restarts.Inc()
		r.update(func(s *Status) { s.Restarts++ })
		r.Log.Info("the manager stopped; replacing it in-process", "reason", err.Error(), "ranFor", ran.Round(time.Millisecond).String())
		if ran >= 2*maxB {
			backoff = minB
		}
		if !wait(PhaseRestarting, err) {
			break
		}
	}
	return nil
}

// runManager starts mgr and returns when it stops, with how long it ran with synced caches.
func (r *Runner) runManager(ctx context.Context, mgr ctrl.Manager) (time.Duration, error) {
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	var syncedAt time.Time
	var syncMu sync.Mutex
	wg.Add(2)
	go func() {
		defer wg.Done()
		if mgr.GetCache().WaitForCacheSync(mctx) {
			syncMu.Lock()
			syncedAt = time.Now()
			syncMu.Unlock()
			r.update(func(s *Status) { s.Phase = PhaseRunning })
		}
	}()
	go func() {
		defer wg.Done()
		select {
		case <-mgr.Elected():
			r.update(func(s *Status) { s.Leader = true })
			r.Log.Info("leading: reconciling", "identity", r.Status().Identity)
		case <-mctx.Done():
		}
	}()
	err := mgr.Start(mctx)
	cancel()
	wg.Wait()
	syncMu.Lock()
	defer syncMu.Unlock()
	if syncedAt.IsZero() {
		return 0, err
	}
	return time.Since(syncedAt), err
}

// HealthHandler serves /healthz (200 while the process runs: waiting for the API server is no
// reason to be restarted) and /readyz (200 once a manager runs with synced caches, else 503),
// each with the status as its body.
func (r *Runner) HealthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "ok: %s\n", r.Status())
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		s := r.Status()
		if !s.Ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", s)
			return
		}
		fmt.Fprintf(w, "ok: %s\n", s)
	})
	return mux
}

// apiProbe asks the API server whether it serves the operator's API group: reachable,
// authenticated, and the CRDs installed.
type apiProbe struct {
	client  rest.Interface
	timeout time.Duration
	path    string
}

func newAPIProbe(cfg *rest.Config, timeout time.Duration) (*apiProbe, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	return &apiProbe{client: dc.RESTClient(), timeout: timeout, path: "/apis/" + vpnv1.GroupVersion.String()}, nil
}

func (p *apiProbe) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	res := p.client.Get().AbsPath(p.path).Do(ctx)
	var code int
	res.StatusCode(&code)
	if err := res.Error(); err != nil {
		if code == http.StatusNotFound {
			return fmt.Errorf("the API server does not serve %s (are the CRDs installed?)", vpnv1.GroupVersion)
		}
		return fmt.Errorf("the API server is not reachable: %w", err)
	}
	return nil
}
