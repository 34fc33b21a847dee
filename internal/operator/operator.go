// Package operator assembles the controller-runtime manager: scheme, cache, indexes and the
// reconcilers. cmd/operator and the integration tests both start the operator through it.
package operator

import (
	"context"
	"fmt"
	"net/netip"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
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
	// LeaderElection with its lease namespace.
	LeaderElection          bool
	LeaderElectionNamespace string
	// SkipControllerNameValidation lets one process start the operator more than once (tests).
	SkipControllerNameValidation bool
	// OpenStack, when set, provisions floatingIP / floatingIPPool endpoints.
	OpenStack cloud.Provider
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
	if c.Render.AgentImage == "" {
		return fmt.Errorf("--agent-image must be set")
	}
	if c.Render.StrongSwanImage == "" {
		return fmt.Errorf("--strongswan-image must be set")
	}
	if c.Concurrency < 1 {
		return fmt.Errorf("--concurrency must be at least 1")
	}
	return nil
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

// NewManager builds the manager with both reconcilers; the caller starts it.
func NewManager(ctx context.Context, restCfg *rest.Config, cfg Config) (ctrl.Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	managed := labels.SelectorFromSet(labels.Set{controller.LabelManagedBy: controller.LabelManagedByValue})
	byManaged := cache.ByObject{Label: managed}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                  Scheme(),
		Metrics:                 metricsserver.Options{BindAddress: cfg.MetricsAddr},
		HealthProbeBindAddress:  cfg.HealthAddr,
		Controller:              config.Controller{SkipNameValidation: &cfg.SkipControllerNameValidation},
		LeaderElection:          cfg.LeaderElection,
		LeaderElectionID:        "bnerd-vpn-operator.vpn.bnerd.net",
		LeaderElectionNamespace: cfg.LeaderElectionNamespace,
		// The operator only caches the children it owns, not every Deployment or ConfigMap.
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&appsv1.Deployment{}:          byManaged,
			&corev1.ConfigMap{}:           byManaged,
			&corev1.ServiceAccount{}:      byManaged,
			&rbacv1.Role{}:                byManaged,
			&rbacv1.RoleBinding{}:         byManaged,
			&networkingv1.NetworkPolicy{}: byManaged,
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
		hostnetwork.New(mgr.GetClient(), hostnetwork.Config{NodeIndex: controller.IndexGatewayNode}))
	if err := (&controller.GatewayReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Options: cfg.Options, Endpoints: endpoints}).
		SetupWithManager(mgr, cfg.Concurrency); err != nil {
		return nil, fmt.Errorf("gateway controller: %w", err)
	}
	if err := (&controller.PeerReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Model: cfg.Options.Model}).
		SetupWithManager(mgr, cfg.Concurrency); err != nil {
		return nil, fmt.Errorf("peer controller: %w", err)
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
