// Package operator assembles the controller-runtime manager: scheme, cache, indexes and the
// reconcilers. cmd/operator and the integration tests both start the operator through it.
package operator

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/hostnetwork"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/loadbalancer"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/kube"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// Config is the operator's whole configuration.
type Config struct {
	controller.Options
	// Concurrency is the number of parallel reconciles per controller.
	Concurrency int
	// MetricsAddr and HealthAddr: "0" disables.
	MetricsAddr string
	HealthAddr  string
	// LeaderElection with its lease namespace (the pod's, from the in-cluster service account,
	// when empty).
	LeaderElection          bool
	LeaderElectionNamespace string
	// LeaderElectionID names the Lease; DefaultLeaderElectionID when empty.
	LeaderElectionID string
	// LeaderElectionIdentity is this process's holder identity in the Lease; "<hostname>_<random>"
	// when empty. Run fixes it once per process, so a manager rebuilt in-process after a lost
	// lease renews a lease that still names it at once instead of waiting for it to expire.
	LeaderElectionIdentity string
	// LeaseDuration, RenewDeadline and RetryPeriod of the election; DefaultLeaseDuration,
	// DefaultRenewDeadline and DefaultRetryPeriod when zero (see there for why).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// SkipControllerNameValidation lets one process start the operator more than once (tests).
	SkipControllerNameValidation bool
	// OpenStack, when set, provisions floatingIP / floatingIPPool endpoints.
	OpenStack cloud.Provider
	// Logger is the manager's logger (its reconcilers', caches' and event recorder's); the
	// global ctrl.Log when unset.
	Logger logr.Logger
}

// Scheme holds every type the operator reads or writes.
func Scheme() *runtime.Scheme { return kube.Scheme() }

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// Validate checks the configuration before anything starts.
func (c *Config) Validate() error {
	p := c.Model.PoolCIDR
	if !p.IsValid() || !p.Addr().Is4() || p.Masked() != p {
		return fmt.Errorf("--service-cidr-pool %q: must be an IPv4 network address in CIDR notation", p)
	}
	if !model.CGNATRange.Contains(p.Addr()) || p.Bits() < model.CGNATRange.Bits() || p.Bits() > 24 {
		return fmt.Errorf("--service-cidr-pool %s: must lie inside %s and hold at least one /24", p, model.CGNATRange)
	}
	for _, l := range []struct {
		flag string
		list []netip.Prefix
	}{
		{"--internal-source-cidrs", c.Model.InternalSourceCIDRs},
		{"--cluster-pod-cidrs", c.Model.ClusterPodCIDRs},
		{"--cluster-service-cidrs", c.Model.ClusterServiceCIDRs},
		{"--node-cidrs", c.Model.NodeCIDRs},
		{"--allowed-target-cidrs", c.Model.AllowedTargetCIDRs},
	} {
		for _, s := range l.list {
			if !s.IsValid() || !s.Addr().Is4() || s.Masked() != s {
				return fmt.Errorf("%s %q: must be IPv4 network addresses in CIDR notation", l.flag, s)
			}
		}
	}
	seen := map[string]bool{}
	for _, ns := range c.GatewayNamespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("--gateway-namespaces %q: not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
		if seen[ns] {
			return fmt.Errorf("--gateway-namespaces %q: listed twice", ns)
		}
		seen[ns] = true
	}
	if c.Render.AgentImage == "" {
		return fmt.Errorf("--agent-image must be set")
	}
	if c.Render.StrongSwanImage == "" {
		return fmt.Errorf("--strongswan-image must be set")
	}
	if c.RolloutConcurrency < 0 {
		return fmt.Errorf("--gateway-rollout-concurrency %d: must not be negative (0: unbounded)", c.RolloutConcurrency)
	}
	if c.Concurrency < 1 {
		return fmt.Errorf("--concurrency must be at least 1")
	}
	if c.LeaderElection {
		lease, renew, retry := c.leaseTimes()
		// client-go's own rules (leaderelection.NewLeaderElector), named by flag.
		switch {
		case retry <= 0:
			return fmt.Errorf("--leader-elect-retry-period %s: must be positive", retry)
		case renew <= time.Duration(1.2*float64(retry)):
			return fmt.Errorf("--leader-elect-renew-deadline %s: must be longer than 1.2 × --leader-elect-retry-period (%s)", renew, retry)
		case lease <= renew:
			return fmt.Errorf("--leader-elect-lease-duration %s: must be longer than --leader-elect-renew-deadline (%s)", lease, renew)
		}
	}
	return nil
}

// Leader election defaults. The leader renews its Lease every RetryPeriod; when it cannot renew
// for RenewDeadline it gives the lease up, and a standby takes a Lease that was not renewed for
// LeaseDuration; standbys try every RetryPeriod plus a jitter of up to 1.2 × RetryPeriod.
// controller-runtime's 15 s / 10 s / 2 s drop leadership after a 10 s API outage, and every drop
// used to cost a process restart. With 30 s / 20 s / 2 s an API server outage shorter than 20 s
// (a restart, an etcd leader change) keeps the leader; a leader that dies without releasing its
// Lease is replaced within LeaseDuration + 2.2 × RetryPeriod (30–35 s); a leader that stops
// cleanly (rollout, drain) releases it and a standby takes over within 2.2 × RetryPeriod (2–5 s).
// A leader that did lose its Lease is replaced in-process (Run), and reconciles again about a
// second after the API server is back when no standby took over.
const (
	DefaultLeaseDuration    = 30 * time.Second
	DefaultRenewDeadline    = 20 * time.Second
	DefaultRetryPeriod      = 2 * time.Second
	DefaultLeaderElectionID = "bnerd-vpn-operator.vpn.bnerd.net"
)

func (c *Config) leaseTimes() (lease, renew, retry time.Duration) {
	lease, renew, retry = c.LeaseDuration, c.RenewDeadline, c.RetryPeriod
	if lease == 0 {
		lease = DefaultLeaseDuration
	}
	if renew == 0 {
		renew = DefaultRenewDeadline
	}
	if retry == 0 {
		retry = DefaultRetryPeriod
	}
	return lease, renew, retry
}

func (c *Config) leaseName() string {
	if c.LeaderElectionID == "" {
		return DefaultLeaderElectionID
	}
	return c.LeaderElectionID
}

// NewIdentity is a leader election identity: the host (the pod's) name and a random suffix,
// as controller-runtime makes them, so the Lease names the pod that holds it.
func NewIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "bnerd-vpn-operator"
	}
	return host + "_" + string(uuid.NewUUID())
}

// inClusterNamespace is the file the pod's service account namespace is mounted at.
const inClusterNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// resourceLock is the Lease lock the manager elects with, holding cfg's identity (which
// controller-runtime would otherwise make up anew for every manager).
func resourceLock(restCfg *rest.Config, cfg Config) (resourcelock.Interface, error) {
	ns := cfg.LeaderElectionNamespace
	if ns == "" {
		raw, err := os.ReadFile(inClusterNamespace)
		if err != nil {
			return nil, fmt.Errorf("leader election: no --leader-election-namespace and not running in a pod: %w", err)
		}
		ns = strings.TrimSpace(string(raw))
	}
	_, renew, _ := cfg.leaseTimes()
	lc := rest.AddUserAgent(rest.CopyConfig(restCfg), "leader-election")
	// One hung request must not use up the whole renew deadline (as controller-runtime does).
	lc.Timeout = max(renew/2, time.Second)
	core, err := corev1client.NewForConfig(lc)
	if err != nil {
		return nil, err
	}
	coord, err := coordinationv1client.NewForConfig(lc)
	if err != nil {
		return nil, err
	}
	return resourcelock.New(resourcelock.LeasesResourceLock, ns, cfg.leaseName(), core, coord,
		resourcelock.ResourceLockConfig{Identity: cfg.LeaderElectionIdentity})
}

// ParsePrefixes parses a list of CIDRs, naming the bad one.
func ParsePrefixes(flag string, in []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(in))
	for _, s := range in {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a CIDR: %w", flag, s, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// defaultNamespaces is the cache's DefaultNamespaces for --gateway-namespaces: every namespaced
// kind the operator watches (gateways, peers, Secrets' metadata, children, pods, ...) is watched
// in these namespaces only, so it neither reconciles nor reads, nor needs permission for,
// anything elsewhere. Cluster-scoped kinds (nodes, namespaces, ClusterLinks) are not affected.
// Nil (every namespace) when none are listed.
func defaultNamespaces(namespaces []string) map[string]cache.Config {
	if len(namespaces) == 0 {
		return nil
	}
	out := make(map[string]cache.Config, len(namespaces))
	for _, ns := range namespaces {
		out[ns] = cache.Config{}
	}
	return out
}

// NewManager builds the manager with both reconcilers; the caller starts it. It needs the API
// server (REST mappings of the cached types): Run waits for it and retries.
func NewManager(ctx context.Context, restCfg *rest.Config, cfg Config) (ctrl.Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lease, renew, retry := cfg.leaseTimes()
	var lock resourcelock.Interface
	if cfg.LeaderElection {
		if cfg.LeaderElectionIdentity == "" {
			cfg.LeaderElectionIdentity = NewIdentity()
		}
		var err error
		if lock, err = resourceLock(restCfg, cfg); err != nil {
			return nil, err
		}
	}
	managed := labels.SelectorFromSet(labels.Set{controller.LabelManagedBy: controller.LabelManagedByValue})
	byManaged := cache.ByObject{Label: managed}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Logger:                              cfg.Logger,
		Scheme:                              Scheme(),
		Metrics:                             metricsserver.Options{BindAddress: cfg.MetricsAddr},
		HealthProbeBindAddress:              cfg.HealthAddr,
		Controller:                          config.Controller{SkipNameValidation: &cfg.SkipControllerNameValidation},
		LeaderElection:                      cfg.LeaderElection,
		LeaderElectionID:                    cfg.leaseName(),
		LeaderElectionResourceLockInterface: lock,
		LeaseDuration:                       &lease,
		RenewDeadline:                       &renew,
		RetryPeriod:                         &retry,
		// A leader that is stopped (SIGTERM: a rollout, a drain) releases the Lease once its
		// reconcilers have returned, so a standby takes over within one RetryPeriod instead of
		// waiting LeaseDuration. Safe because controller-runtime releases it only after the
		// leader's runnables stopped.
		LeaderElectionReleaseOnCancel: true,
		// The operator only caches the children it owns, not every Deployment or ConfigMap;
		// with --gateway-namespaces, namespaced objects of those namespaces only.
		Cache: cache.Options{DefaultNamespaces: defaultNamespaces(cfg.GatewayNamespaces), ByObject: map[client.Object]cache.ByObject{
			&appsv1.Deployment{}:            byManaged,
			&corev1.ConfigMap{}:             byManaged,
			&corev1.ServiceAccount{}:        byManaged,
			&rbacv1.Role{}:                  byManaged,
			&rbacv1.RoleBinding{}:           byManaged,
			&networkingv1.NetworkPolicy{}:   byManaged,
			&policyv1.PodDisruptionBudget{}: byManaged,
			// The gateways' Leases (their agents elect the active pod through them).
			&coordinationv1.Lease{}: byManaged,
			// Every pod's address matters (reverse-exposure clients), little else of it.
			&corev1.Pod{}: {Transform: controller.StripPod},
		}},
		Client: client.Options{Cache: &client.CacheOptions{
			// Secrets are never cached in full: the operator only needs to know they exist.
			DisableFor: []client.Object{&corev1.Secret{}},
		}},
	})
	if err != nil {
		return nil, err
	}
	if err := controller.SetupIndexes(ctx, mgr); err != nil {
		return nil, err
	}
	if err := controller.RegisterMetrics(ctrlmetrics.Registry); err != nil {
		return nil, err
	}
	recorder := mgr.GetEventRecorder("bnerd-vpn-operator")
	endpoints := cloud.NewChooser(cfg.OpenStack,
		loadbalancer.New(mgr.GetClient(), loadbalancer.Config{}),
		hostnetwork.New(mgr.GetClient(), hostnetwork.Config{NodeIndex: controller.IndexGatewayNode,
			NamespacePermitted: controller.HostNetworkNamespacePermitted(mgr.GetClient(), cfg.Options.HostNetworkNamespaces)}))
	// The metadata of Secrets comes from the cache itself: the client reads Secrets uncached.
	secrets := &controller.SecretFacts{Metadata: mgr.GetCache(), API: mgr.GetAPIReader()}
	gateways := &controller.GatewayReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Secrets: secrets, Recorder: recorder, Options: cfg.Options, Endpoints: endpoints}
	if err := gateways.SetupWithManager(mgr, cfg.Concurrency); err != nil {
		return nil, fmt.Errorf("gateway controller: %w", err)
	}
	// The legacy IPsecGateway runs through the same phases (and allocator) as a VPNGateway.
	if err := (&controller.IPsecGatewayReconciler{Gateways: gateways}).SetupWithManager(mgr, cfg.Concurrency); err != nil {
		return nil, fmt.Errorf("ipsecgateway controller: %w", err)
	}
	// The active pod of every gateway with a standby follows its Lease.
	if err := (&controller.ActivePodReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr, cfg.Concurrency); err != nil {
		return nil, fmt.Errorf("active pod controller: %w", err)
	}
	if err := (&controller.ClusterLinkReconciler{Client: mgr.GetClient(), Recorder: recorder, Model: cfg.Options.Model}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("clusterlink controller: %w", err)
	}
	if err := (&controller.PeerReconciler{Client: mgr.GetClient(), Secrets: secrets, Recorder: recorder, Model: cfg.Options.Model}).
		SetupWithManager(mgr, cfg.Concurrency); err != nil {
		return nil, fmt.Errorf("peer controller: %w", err)
	}
	if binder, ok := cfg.OpenStack.(cloud.UplinkBinder); ok && binder != nil {
		// A bound uplink is checked against the cloud as often as a ready endpoint.
		var resync time.Duration
		if r, ok := binder.(interface{ ResyncPeriod() time.Duration }); ok {
			resync = r.ResyncPeriod()
		}
		if err := (&controller.UplinkBindingReconciler{Client: mgr.GetClient(), Binder: binder, Recorder: recorder, Resync: resync}).SetupWithManager(mgr); err != nil {
			return nil, fmt.Errorf("uplink binding controller: %w", err)
		}
	}
	if cfg.HealthAddr != "0" && cfg.HealthAddr != "" {
		if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
			return nil, err
		}
		if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}
