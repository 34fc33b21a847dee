package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/availability"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/metrics"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/status"
)

// standbyFlags are the flags of an active/standby gateway's pod.
type standbyFlags struct {
	lease, podName, podIP string
}

func (s *standbyFlags) bind(f *pflag.FlagSet) {
	f.StringVar(&s.lease, "standby-lease", "", "the gateway's active/standby Lease: this pod is one of two, active while the Lease names it, fenced standby otherwise (empty: a gateway without a standby)")
	f.StringVar(&s.podName, "pod-name", os.Getenv("POD_NAME"), "this pod's name (with --standby-lease)")
	f.StringVar(&s.podIP, "pod-ip", os.Getenv("POD_IP"), "this pod's IP, where the other pod of the pair probes it (with --standby-lease)")
}

// elector wires the pod's side of the pair: nil without --standby-lease.
func (s *standbyFlags) elector(o runOptions, cs kubernetes.Interface, events *status.Events, engine *agent.Engine, driver *lazyDriver, log logr.Logger) (*availability.Elector, error) {
	if s.lease == "" {
		return nil, nil
	}
	if cs == nil {
		return nil, errors.New("--standby-lease needs the cluster's API")
	}
	if s.podName == "" || s.podIP == "" {
		return nil, errors.New("--standby-lease needs --pod-name and --pod-ip (or POD_NAME and POD_IP)")
	}
	_, port, err := net.SplitHostPort(o.metricsAddr)
	if err != nil {
		return nil, fmt.Errorf("--standby-lease needs --metrics-addr (the probes' port): %w", err)
	}
	probePort, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %q: %w", o.metricsAddr, err)
	}
	vip, err := o.where.vipAddr()
	if err != nil {
		return nil, err
	}
	// On the host network the VIP moves with the role; the fence drops only what is the
	// gateway's own (the VIP's IKE and ESP, its WireGuard port), never the node's other traffic.
	fence := &availability.Fence{Scope: vip}
	var announcer availability.Announcer
	switch {
	case vip.IsValid():
		announcer = &availability.VIP{Address: vip, Log: log.WithName("availability")}
	case o.where.hostNetwork:
		return nil, errors.New("--standby-lease on the host network needs --vip: the node's own address cannot move to the other node")
	}
	el := &availability.Elector{
		Leases: cs.CoordinationV1(), Namespace: o.namespace, Lease: s.lease, Gateway: o.gateway,
		Identity: s.podName, Address: s.podIP, ProbePort: probePort,
		Fence:     fence,
		Announcer: announcer,
		Dataplane: func() any { return driver.current() },
		Healthy:   availability.DataplaneHealth(engine.Ready, func() any { return driver.current() }),
		Log:       log.WithName("availability"),
	}
	if events != nil {
		el.Events = events
	}
	engine.Standby = el.Standby
	engine.BeforeDriver = el.Prepare
	engine.OnTearDown = el.ReleaseAddress
	return el, nil
}

// availabilityMetrics is the Collector's view of the elector.
func availabilityMetrics(el *availability.Elector) func() metrics.Availability {
	return func() metrics.Availability {
		return metrics.Availability{Active: el.IsActive(), StandbyReady: el.StandbyReady(), Takeovers: el.Takeovers()}
	}
}
