// Command operator runs bnerd-vpn-operator: it reconciles VPNGateways and VPNPeers into gateway
// pods and their configuration.
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/openstack"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/operator"
	"github.com/bnerd/bnerd-vpn-operator/internal/version"
)

func main() {
	if err := command().Execute(); err != nil {
		os.Exit(1)
	}
}

func command() *cobra.Command {
	var (
		cfg                                                          operator.Config
		pool                                                         string
		internal                                                     []string
		podCIDRs, svcCIDRs, nodeCIDRs, allowedTargets                []string
		hostNetworkNamespaces                                        string
		qps                                                          float32
		burst                                                        int
		zapOpts                                                      = zap.Options{}
		pullPolicy                                                   string
		osYAML, osCloud, osNetwork, osSubnet, osNADMaster, osBinding string
		osNADTemplate                                                string
		metricsNamespaces                                            string
		osResync                                                     time.Duration
		gatewayTolerations                                           string
		gatewayCPURequest, gatewayMemoryRequest                      string
		gatewayCPULimit, gatewayMemoryLimit                          string
	)
	cmd := &cobra.Command{
		Use:           "operator",
		Short:         "Reconcile VPNGateways and VPNPeers into site-to-site VPN gateway pods",
		Version:       version.Get(),
		SilenceUsage:  true,
		SilenceErrors: false,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
			ctrl.Log.WithName("operator").Info("bnerd-vpn-operator starting", "version", version.Get(), "goversion", runtime.Version())
			p, err := netip.ParsePrefix(pool)
			if err != nil {
				return fmt.Errorf("--service-cidr-pool %q: %w", pool, err)
			}
			cfg.Model.PoolCIDR = p
			for _, l := range []struct {
				flag string
				in   []string
				out  *[]netip.Prefix
			}{
				{"--internal-source-cidrs", internal, &cfg.Model.InternalSourceCIDRs},
				{"--cluster-pod-cidrs", podCIDRs, &cfg.Model.ClusterPodCIDRs},
				{"--cluster-service-cidrs", svcCIDRs, &cfg.Model.ClusterServiceCIDRs},
				{"--node-cidrs", nodeCIDRs, &cfg.Model.NodeCIDRs},
				{"--allowed-target-cidrs", allowedTargets, &cfg.Model.AllowedTargetCIDRs},
			} {
				if *l.out, err = operator.ParsePrefixes(l.flag, l.in); err != nil {
					return err
				}
			}
			if cfg.Options.HostNetworkNamespaces, err = labels.Parse(hostNetworkNamespaces); err != nil {
				return fmt.Errorf("--host-network-namespace-selector %q: %w", hostNetworkNamespaces, err)
			}
			cfg.Render.OperatorNamespace = os.Getenv("POD_NAMESPACE")
			if cmd.Flags().Changed("metrics-namespace-selector") {
				if cfg.Render.MetricsNamespaces, err = metav1.ParseToLabelSelector(metricsNamespaces); err != nil {
					return fmt.Errorf("--metrics-namespace-selector %q: %w", metricsNamespaces, err)
				}
			}
			if cfg.Render.Pod.Resources, err = operator.GatewayResources(gatewayCPURequest, gatewayMemoryRequest, gatewayCPULimit, gatewayMemoryLimit); err != nil {
				return err
			}
			if cfg.Render.Pod.Tolerations, err = operator.GatewayTolerations(gatewayTolerations); err != nil {
				return err
			}
			if cfg.Render.Pod.NodeLossToleration < 0 {
				return fmt.Errorf("--gateway-node-loss-toleration %s: must not be negative", cfg.Render.Pod.NodeLossToleration)
			}
			switch pp := corev1.PullPolicy(pullPolicy); pp {
			case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
				cfg.Render.ImagePullPolicy = pp
			default:
				return fmt.Errorf("--image-pull-policy %q: must be Always, IfNotPresent or Never", pullPolicy)
			}
			if osYAML != "" {
				raw, err := os.ReadFile(osYAML)
				if err != nil {
					return fmt.Errorf("--openstack-clouds-yaml: %w", err)
				}
				p, err := openstack.NewFromCloudsYAML(raw, osCloud, openstack.Config{NetworkID: osNetwork, SubnetID: osSubnet, NADMaster: osNADMaster, PortBinding: osBinding, NADConfigTemplate: osNADTemplate, CacheTTL: osResync})
				if err != nil {
					return fmt.Errorf("OpenStack endpoint provider: %w", err)
				}
				cfg.OpenStack = p
			}
			// Every setting is checked before the cluster is looked for (Run checks again).
			if err := cfg.Validate(); err != nil {
				return err
			}
			restCfg, err := ctrl.GetConfig()
			if err != nil {
				return err
			}
			restCfg.QPS, restCfg.Burst = qps, burst
			// Run waits for the API server instead of failing, and replaces a manager that lost
			// its leader lease in-process instead of exiting (see internal/operator/run.go).
			return operator.Run(ctrl.SetupSignalHandler(), restCfg, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&pool, "service-cidr-pool", model.DefaultPoolCIDR.String(), "pool gateways' service CIDRs (/24 each) are allocated from; must lie inside 100.64.0.0/10")
	f.StringSliceVar(&internal, "internal-source-cidrs", nil, "address ranges allowed to initiate toward reverse exposures (the pod CIDR; every ready ClusterLink's ranges are added to them); reverse exposures stay inactive until set")
	f.StringSliceVar(&podCIDRs, "cluster-pod-cidrs", nil, "the cluster's pod CIDRs: no peer's subnets may overlap them")
	f.StringSliceVar(&svcCIDRs, "cluster-service-cidrs", nil, "the cluster's Service CIDRs: no peer's subnets may overlap them")
	f.StringSliceVar(&nodeCIDRs, "node-cidrs", nil, "the networks of the cluster's nodes: no peer's subnets may overlap them")
	f.StringSliceVar(&allowedTargets, "allowed-target-cidrs", nil, "when set, the only ranges exposure targets may lie in (as resolved: include the Service and pod CIDRs for Service targets)")
	f.StringVar(&hostNetworkNamespaces, "host-network-namespace-selector", controller.DefaultHostNetworkNamespaces,
		"label selector of the namespaces whose gateways may use a hostNetwork endpoint (an empty selector allows every namespace)")
	f.StringSliceVar(&cfg.Options.GatewayNamespaces, "gateway-namespaces", nil,
		"the namespaces the operator serves (ns1,ns2,...): it watches, reconciles and reads namespaced objects in these only, so its Secret permissions can be granted by a Role in each (empty: every namespace)")
	f.IntVar(&cfg.Options.Limits.Gateways, "max-gateways-per-namespace", controller.DefaultNamespaceLimits.Gateways,
		"gateways of one namespace that may hold a service CIDR (a new one beyond it gets NamespaceLimitReached; 0: no limit)")
	f.IntVar(&cfg.Options.Limits.Addresses, "max-service-addresses-per-namespace", controller.DefaultNamespaceLimits.Addresses,
		"service-CIDR addresses the gateways of one namespace may hold together (a /24 is 256; 0: no limit)")
	f.StringVar(&metricsNamespaces, "metrics-namespace-selector", "",
		"label selector of the namespaces whose pods may reach the gateway agents' metrics port (unset: the operator's namespace and \"monitoring\"; an empty selector: every namespace)")
	f.StringVar(&cfg.Render.AgentImage, "agent-image", "bnerd-vpn-gateway:latest", "gateway image running the agent (and, on a userspace dataplane, the WireGuard device): make images builds bnerd-vpn-gateway:<version>")
	f.StringVar(&cfg.Render.StrongSwanImage, "strongswan-image", "bnerd-vpn-gateway:latest", "gateway image running charon (the same image as the agent's by default)")
	f.StringVar(&pullPolicy, "image-pull-policy", "IfNotPresent", "pull policy of the gateway images (Always, IfNotPresent, Never)")
	f.StringToStringVar(&cfg.Render.Pod.NodeSelector, "gateway-node-selector", nil, "node labels gateway pods must match (key=value,...; a host-network gateway is pinned to its node as well)")
	f.StringVar(&gatewayTolerations, "gateway-tolerations", "", "tolerations of gateway pods: a JSON list of Kubernetes tolerations")
	f.DurationVar(&cfg.Render.Pod.NodeLossToleration, "gateway-node-loss-toleration", 15*time.Second,
		"how long a pod-network gateway's pod stays on a node that is not ready or unreachable before it is evicted and started on another (0: Kubernetes' default, 300s; host-network gateways keep the default)")
	f.StringVar(&cfg.Render.Pod.PriorityClassName, "gateway-priority-class", "", "PriorityClass of gateway pods (empty: the cluster's default)")
	f.StringSliceVar(&cfg.Render.Pod.ImagePullSecrets, "gateway-image-pull-secrets", nil, "Secrets, in each gateway's namespace, to pull the gateway images with")
	f.StringVar(&gatewayCPURequest, "gateway-cpu-request", "50m", "CPU request of each gateway container (empty: none)")
	f.StringVar(&gatewayMemoryRequest, "gateway-memory-request", "64Mi", "memory request of each gateway container (empty: none)")
	f.StringVar(&gatewayCPULimit, "gateway-cpu-limit", "", "CPU limit of each gateway container (empty: none)")
	f.StringVar(&gatewayMemoryLimit, "gateway-memory-limit", "256Mi", "memory limit of each gateway container (empty: none)")
	f.BoolVar(&cfg.Model.Standby, "gateway-standby", false,
		"give every VPNGateway that does not say otherwise (spec.availability.standby) a standby pod on another node that takes over within about a second (loadBalancer endpoints only)")
	f.IntVar(&cfg.Options.RolloutConcurrency, "gateway-rollout-concurrency", controller.DefaultRolloutConcurrency,
		"gateways that may move to new gateway images (--agent-image, --strongswan-image: an operator upgrade) at a time; the others keep the images their pods run, with everything else applied, until fewer are rolling (0: every gateway at once)")
	f.BoolVar(&cfg.Render.UserspaceDataplane, "userspace-dataplane", false, "give gateway pods /dev/net/tun and use userspace ESP/WireGuard (kernels without ESP or the WireGuard module)")
	f.IntVar(&cfg.Concurrency, "concurrency", 4, "parallel reconciles per controller")
	f.StringVar(&cfg.MetricsAddr, "metrics-bind-address", ":8080", "metrics endpoint address (0 disables)")
	f.StringVar(&cfg.HealthAddr, "health-probe-bind-address", ":8081", "health probe address (0 disables)")
	f.BoolVar(&cfg.LeaderElection, "leader-elect", false, "elect a leader so only one replica reconciles")
	f.StringVar(&cfg.LeaderElectionNamespace, "leader-election-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the leader election lease (defaults to $POD_NAMESPACE, else the pod's service account namespace)")
	f.DurationVar(&cfg.LeaseDuration, "leader-elect-lease-duration", operator.DefaultLeaseDuration, "how long standbys wait after the leader's last renewal before taking the lease (a leader that dies without releasing it is replaced after about this long)")
	f.DurationVar(&cfg.RenewDeadline, "leader-elect-renew-deadline", operator.DefaultRenewDeadline, "how long the leader keeps trying to renew before giving the lease up (an API server outage shorter than this keeps the leader)")
	f.DurationVar(&cfg.RetryPeriod, "leader-elect-retry-period", operator.DefaultRetryPeriod, "how often the leader renews and standbys try to acquire (a cleanly stopped leader releases the lease: a standby takes over within this)")
	f.StringVar(&osYAML, "openstack-clouds-yaml", "", "clouds.yaml (mounted from a Secret) for OpenStack floating IP endpoints; unset disables them")
	f.StringVar(&osCloud, "openstack-cloud", "openstack", "the cloud in clouds.yaml")
	f.StringVar(&osNetwork, "openstack-network-id", "", "Neutron network the gateways' ports are created on")
	f.StringVar(&osSubnet, "openstack-subnet-id", "", "subnet of that network for the ports' addresses (optional)")
	f.StringVar(&osNADMaster, "openstack-nad-master", "eth1", "node interface the Multus attachment of a gateway port uses")
	f.StringVar(&osBinding, "openstack-port-binding", openstack.BindingTrunk, "how the cloud delivers a gateway port's frames to its pod's node: trunk (the port a VLAN subport of the node's trunk), address-pairs (the port's address and MAC an allowed address pair of the node's NIC) or none (no port security on the nodes' ports)")
	f.DurationVar(&osResync, "openstack-resync", openstack.DefaultCacheTTL, "how often a ready OpenStack endpoint is checked against the cloud again (what was changed there — a security-group rule removed, the floating IP disassociated — is repaired then; Neutron is not asked more often for an unchanged gateway)")
	f.StringVar(&osNADTemplate, "openstack-nad-config-template", "", "text/template of the CNI config of a gateway port's NetworkAttachmentDefinition (empty: for the trunk binding a VLAN interface with the port's VLAN, MAC and address on --openstack-nad-master, otherwise macvlan there; e.g. host-device when the port is attached to the node as its own NIC)")
	f.Float32Var(&qps, "kube-api-qps", 200, "API requests per second")
	f.IntVar(&burst, "kube-api-burst", 400, "API request burst")
	logFlags := flag.NewFlagSet("log", flag.ContinueOnError)
	zapOpts.BindFlags(logFlags)
	f.AddGoFlagSet(logFlags)
	return cmd
}
