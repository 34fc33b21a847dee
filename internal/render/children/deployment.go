package children

import (
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
)

// Capabilities: every container drops ALL and adds back only these.
const (
	capNetAdmin       corev1.Capability = "NET_ADMIN"
	capNetBindService corev1.Capability = "NET_BIND_SERVICE"
	capNetRaw         corev1.Capability = "NET_RAW"
)

// terminationGracePeriod (model.GatewayTerminationGrace): charon and the agent normally stop
// within a second, so it only bounds a slow stop, during which a host-network agent waits for
// its tunnels to go before it removes its ruleset (model.TeardownWait).
const terminationGracePeriod = int64(model.GatewayTerminationGrace / time.Second)

// ReadinessPeriodSeconds is how often the kubelet asks the agent /readyz. Kubernetes' default,
// 10 s, made a new gateway pod whose first probe came before its agent had loaded its ruleset
// and configuration wait 10 s more to be Ready — most of a migration's outage (the endpoint
// handed over, the new pod started, its tunnels up, the gateway not yet Ready). The probe is a
// local HTTP GET.
const ReadinessPeriodSeconds int32 = 2

// ContainerCapabilities returns the capabilities a container of the gateway's pod adds after
// dropping ALL, by container name (nil for a container the pod does not have).
//   - agent-init installs the nftables ruleset: NET_ADMIN.
//   - charon (IPsec only) binds UDP 500/4500, installs SAs/routes and uses raw sockets:
//     NET_ADMIN, NET_BIND_SERVICE, NET_RAW.
//   - agent applies nftables changes and drives WireGuard: NET_ADMIN; for a kernel WireGuard
//     device with a listen port below 1024 also NET_BIND_SERVICE; on the host network with a
//     standby (a VIP that moves between nodes) also NET_RAW, for the gratuitous ARP that tells
//     the node network where the VIP went.
//   - wireguard (WireGuard on a userspace dataplane only) creates the TUN and binds the listen
//     port: NET_ADMIN, and NET_BIND_SERVICE for a port below 1024.
func ContainerCapabilities(gw *model.Gateway, container string, userspace bool) []corev1.Capability {
	switch container {
	case ContainerAgentInit:
		return []corev1.Capability{capNetAdmin}
	case ContainerCharon:
		if gw.Protocol != model.ProtocolIPsec {
			return nil
		}
		return []corev1.Capability{capNetAdmin, capNetBindService, capNetRaw}
	case ContainerAgent:
		caps := []corev1.Capability{capNetAdmin}
		if lowWireGuardPort(gw) && !userspace {
			caps = append(caps, capNetBindService)
		}
		if movesVIP(gw) {
			caps = append(caps, capNetRaw)
		}
		return caps
	case ContainerWireGuard:
		switch {
		case gw.Protocol != model.ProtocolWireGuard || !userspace:
			return nil
		case lowWireGuardPort(gw):
			return []corev1.Capability{capNetAdmin, capNetBindService}
		}
		return []corev1.Capability{capNetAdmin}
	}
	return nil
}

// movesVIP: a host-network gateway with a standby, whose active pod's agent announces the VIP.
func movesVIP(gw *model.Gateway) bool {
	return gw.Endpoint.Kind == model.EndpointHostNetwork && len(gw.Endpoint.NodeNames) > 0
}

func lowWireGuardPort(gw *model.Gateway) bool {
	return gw.Protocol == model.ProtocolWireGuard && gw.WireGuard != nil && gw.WireGuard.ListenPort < 1024
}

// securityContext is the same hardening for every container: no privilege, no escalation,
// a read-only root filesystem, the runtime's default seccomp profile, and only the listed
// capabilities on top of nothing.
func securityContext(caps []corev1.Capability) *corev1ac.SecurityContextApplyConfiguration {
	return corev1ac.SecurityContext().
		WithPrivileged(false).
		WithAllowPrivilegeEscalation(false).
		WithReadOnlyRootFilesystem(true).
		WithCapabilities(corev1ac.Capabilities().
			WithDrop("ALL").
			WithAdd(caps...)).
		WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))
}

// resources are each container's requests and limits: the admin's, else DefaultResources.
func resources(opts Options) *corev1ac.ResourceRequirementsApplyConfiguration {
	r := DefaultResources()
	if opts.Pod.Resources != nil {
		r = *opts.Pod.Resources
	}
	out := corev1ac.ResourceRequirements()
	if len(r.Requests) > 0 {
		out.WithRequests(r.Requests)
	}
	if len(r.Limits) > 0 {
		out.WithLimits(r.Limits)
	}
	return out
}

// tolerateNodeLoss bounds how long a pod stays on a lost node (PodSettings.NodeLossToleration).
func tolerateNodeLoss(spec *corev1ac.PodSpecApplyConfiguration, p PodSettings) {
	seconds := int64(p.NodeLossToleration.Round(time.Second) / time.Second)
	if seconds <= 0 {
		return
	}
	for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		if slices.ContainsFunc(p.Tolerations, func(t corev1.Toleration) bool { return t.Key == key }) {
			continue
		}
		spec.WithTolerations(corev1ac.Toleration().WithKey(key).WithOperator(corev1.TolerationOpExists).
			WithEffect(corev1.TaintEffectNoExecute).WithTolerationSeconds(seconds))
	}
}

// placePod applies the admin's placement of gateway pods to spec.
func placePod(spec *corev1ac.PodSpecApplyConfiguration, p PodSettings) {
	if len(p.NodeSelector) > 0 {
		spec.WithNodeSelector(p.NodeSelector)
	}
	for _, t := range p.Tolerations {
		tol := corev1ac.Toleration().WithKey(t.Key).WithOperator(t.Operator).WithEffect(t.Effect)
		if t.Value != "" {
			tol.WithValue(t.Value)
		}
		if t.TolerationSeconds != nil {
			tol.WithTolerationSeconds(*t.TolerationSeconds)
		}
		spec.WithTolerations(tol)
	}
	if p.PriorityClassName != "" {
		spec.WithPriorityClassName(p.PriorityClassName)
	}
	for _, name := range p.ImagePullSecrets {
		spec.WithImagePullSecrets(corev1ac.LocalObjectReference().WithName(name))
	}
}

// container sets what every container of the gateway pod shares.
func container(gw *model.Gateway, name, image string, opts Options) *corev1ac.ContainerApplyConfiguration {
	c := corev1ac.Container().
		WithName(name).
		WithImage(image).
		WithSecurityContext(securityContext(ContainerCapabilities(gw, name, opts.UserspaceDataplane))).
		WithResources(resources(opts)).
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError)
	if opts.ImagePullPolicy != "" {
		c.WithImagePullPolicy(opts.ImagePullPolicy)
	}
	return c
}

func configMount() *corev1ac.VolumeMountApplyConfiguration {
	return corev1ac.VolumeMount().WithName(VolumeConfig).WithMountPath(ConfigDir).WithReadOnly(true)
}

func strongSwanRunMount() *corev1ac.VolumeMountApplyConfiguration {
	return corev1ac.VolumeMount().WithName(VolumeStrongSwanRun).WithMountPath(StrongSwanRunDir)
}

func tunMount() *corev1ac.VolumeMountApplyConfiguration {
	return corev1ac.VolumeMount().WithName(VolumeTun).WithMountPath(TunDevice)
}

// apiAccessVolume is what the kubelet would automount for every container — a bound,
// expiring ServiceAccount token, the cluster CA and the namespace — as a volume the agent
// container alone mounts.
func apiAccessVolume() *corev1ac.VolumeApplyConfiguration {
	return corev1ac.Volume().WithName(VolumeAPIAccess).WithProjected(corev1ac.ProjectedVolumeSource().
		WithDefaultMode(0o444).
		WithSources(
			corev1ac.VolumeProjection().WithServiceAccountToken(corev1ac.ServiceAccountTokenProjection().
				WithPath("token").WithExpirationSeconds(3607)),
			corev1ac.VolumeProjection().WithConfigMap(corev1ac.ConfigMapProjection().
				WithName("kube-root-ca.crt").
				WithItems(corev1ac.KeyToPath().WithKey("ca.crt").WithPath("ca.crt"))),
			corev1ac.VolumeProjection().WithDownwardAPI(corev1ac.DownwardAPIProjection().
				WithItems(corev1ac.DownwardAPIVolumeFile().WithPath("namespace").
					WithFieldRef(corev1ac.ObjectFieldSelector().WithAPIVersion("v1").WithFieldPath("metadata.namespace")))),
		))
}

func apiAccessMount() *corev1ac.VolumeMountApplyConfiguration {
	return corev1ac.VolumeMount().WithName(VolumeAPIAccess).WithMountPath(ServiceAccountDir).WithReadOnly(true)
}

func renderDeployment(gw *model.Gateway, owner metav1.OwnerReference, opts Options) *appsv1ac.DeploymentApplyConfiguration {
	ipsec := gw.Protocol == model.ProtocolIPsec
	hostNetwork := gw.Endpoint.Kind == model.EndpointHostNetwork

	// Init: install the nftables ruleset before any tunnel can come up (fail-closed).
	// The agent renders the dataplane from the model itself, for the dataplane it runs.
	var dataplane []string
	if opts.UserspaceDataplane {
		dataplane = []string{"--userspace-dataplane"}
	}
	initC := container(gw, ContainerAgentInit, opts.AgentImage, opts).
		WithCommand(AgentCommand).
		WithArgs(append(append([]string{"init", "--config-dir", ConfigDir}, placementArgs(gw)...), dataplane...)...).
		WithEnv(nodeNameEnv()).
		WithVolumeMounts(configMount())

	// Agent sidecar: converges charon (over VICI) or the WireGuard device, reports status and
	// serves metrics. It reads its configuration and secrets through the API (see the Role).
	agent := container(gw, ContainerAgent, opts.AgentImage, opts).
		WithCommand(AgentCommand).
		WithArgs(append(agentRunArgs(gw, opts), dataplane...)...).
		WithEnv(
			corev1ac.EnvVar().WithName("POD_NAMESPACE").WithValueFrom(corev1ac.EnvVarSource().
				WithFieldRef(corev1ac.ObjectFieldSelector().WithAPIVersion("v1").WithFieldPath("metadata.namespace"))),
			corev1ac.EnvVar().WithName("METRICS_PORT").WithValue(strconv.Itoa(int(opts.MetricsPort))),
			nodeNameEnv(),
		).
		WithPorts(corev1ac.ContainerPort().
			WithName(PortMetrics).
			WithContainerPort(opts.MetricsPort).
			WithProtocol(corev1.ProtocolTCP)).
		WithLivenessProbe(corev1ac.Probe().WithHTTPGet(corev1ac.HTTPGetAction().
			WithPath("/healthz").
			WithPort(intstr.FromString(PortMetrics)))).
		WithReadinessProbe(corev1ac.Probe().WithHTTPGet(corev1ac.HTTPGetAction().
			WithPath("/readyz").
			WithPort(intstr.FromString(PortMetrics))).
			WithPeriodSeconds(ReadinessPeriodSeconds)).
		WithVolumeMounts(configMount(), apiAccessMount())
	if gw.Standby {
		standbyAgent(gw, agent)
	}

	volumes := []*corev1ac.VolumeApplyConfiguration{
		corev1ac.Volume().WithName(VolumeConfig).WithConfigMap(corev1ac.ConfigMapVolumeSource().
			WithName(configMapNameOf(gw)).
			WithDefaultMode(0o444)),
		apiAccessVolume(),
	}
	containers := []*corev1ac.ContainerApplyConfiguration{}

	if ipsec {
		// charon shares the VICI socket directory with the agent.
		charon := container(gw, ContainerCharon, opts.StrongSwanImage, opts).
			WithPorts(
				corev1ac.ContainerPort().WithName(PortIKE).WithContainerPort(IKEPort).WithProtocol(corev1.ProtocolUDP),
				corev1ac.ContainerPort().WithName(PortNATT).WithContainerPort(NATTPort).WithProtocol(corev1.ProtocolUDP),
			).
			WithVolumeMounts(strongSwanRunMount())
		if opts.UserspaceDataplane {
			// kernel-libipsec: userspace ESP over a TUN device.
			charon.WithVolumeMounts(tunMount())
		} else {
			// kernel ESP: the image's configuration without kernel-libipsec.
			charon.WithEnv(corev1ac.EnvVar().WithName("STRONGSWAN_CONF").WithValue(StrongSwanKernelConf))
		}
		agent.WithVolumeMounts(strongSwanRunMount())
		containers = append(containers, charon)
		volumes = append(volumes, corev1ac.Volume().WithName(VolumeStrongSwanRun).
			WithEmptyDir(corev1ac.EmptyDirVolumeSource()))
	} else {
		wgPort := corev1ac.ContainerPort().
			WithName(PortWireGuard).
			WithContainerPort(int32(gw.WireGuard.ListenPort)).
			WithProtocol(corev1.ProtocolUDP)
		// The UAPI socket of a userspace device, and the peers' last endpoints, live in an
		// emptyDir: they outlive the agent's container.
		wgRun := corev1ac.VolumeMount().WithName(VolumeWireGuardRun).WithMountPath(WireGuardRunDir)
		agent.WithVolumeMounts(wgRun)
		volumes = append(volumes, corev1ac.Volume().WithName(VolumeWireGuardRun).
			WithEmptyDir(corev1ac.EmptyDirVolumeSource()))
		if opts.UserspaceDataplane {
			// A userspace device runs in a container of its own, as charon does for IPsec:
			// the agent configures it over its UAPI socket and can restart without the tunnels
			// noticing. It holds no API credentials; it faces the internet.
			device := container(gw, ContainerWireGuard, opts.AgentImage, opts).
				WithCommand(AgentCommand).
				WithArgs("wireguard-device", "--interface", nft.WireGuardDevice(gw)).
				WithPorts(wgPort).
				WithVolumeMounts(wgRun, tunMount())
			containers = append(containers, device)
			agent.WithArgs("--wireguard-mode=external")
		} else {
			// A kernel device: the agent creates and configures it; it outlives the agent's
			// container with the pod's network namespace.
			agent.WithPorts(wgPort)
		}
	}
	containers = append(containers, agent)

	if opts.UserspaceDataplane {
		volumes = append(volumes, corev1ac.Volume().WithName(VolumeTun).
			WithHostPath(corev1ac.HostPathVolumeSource().
				WithPath(TunDevice).
				WithType(corev1.HostPathCharDev)))
	}

	podSecurity := corev1ac.PodSecurityContext().
		WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))

	podSpec := corev1ac.PodSpec().
		WithServiceAccountName(nameOf(gw)).
		// Only the agent talks to the API server: the token is mounted into its container
		// alone (apiAccessVolume), never into charon, which faces the internet, or the init step.
		WithAutomountServiceAccountToken(false).
		WithTerminationGracePeriodSeconds(terminationGracePeriod).
		WithInitContainers(initC).
		WithContainers(containers...).
		WithVolumes(volumes...)

	placePod(podSpec, opts.Pod)

	if hostNetwork {
		// The gateway answers on the node's own address: run in the host's network namespace
		// on exactly that node (with a standby: on the nodes named, which share the network of
		// the VIP the active pod's node holds). Pinned by node affinity, not nodeName: the scheduler then keeps
		// a replacement pod Pending until the old one has released the node's tunnel ports
		// (with nodeName the kubelet rejects it, NodePorts, and failed pods pile up). Pod
		// sysctls are not allowed with hostNetwork; forwarding on the node is the node's
		// configuration. A node field selector takes one value: one term (ORed) per node.
		var terms []*corev1ac.NodeSelectorTermApplyConfiguration
		for _, n := range hostNodes(gw) {
			terms = append(terms, corev1ac.NodeSelectorTerm().
				WithMatchFields(corev1ac.NodeSelectorRequirement().
					WithKey("metadata.name").
					WithOperator(corev1.NodeSelectorOpIn).
					WithValues(n)))
		}
		podSpec.
			WithHostNetwork(true).
			WithDNSPolicy(corev1.DNSClusterFirstWithHostNet).
			WithAffinity(corev1ac.Affinity().WithNodeAffinity(corev1ac.NodeAffinity().
				WithRequiredDuringSchedulingIgnoredDuringExecution(corev1ac.NodeSelector().
					WithNodeSelectorTerms(terms...))))
	} else {
		// The gateway forwards between the tunnel and the cluster inside its own network
		// namespace. net.ipv4.ip_forward is an "unsafe" sysctl for the kubelet: every node that
		// may run gateways must allow it (kubelet --allowed-unsafe-sysctls=net.ipv4.ip_forward,
		// or allowedUnsafeSysctls in the KubeletConfiguration), or the pod is rejected with
		// SysctlForbidden.
		podSecurity.WithSysctls(corev1ac.Sysctl().WithName("net.ipv4.ip_forward").WithValue("1"))
		tolerateNodeLoss(podSpec, opts.Pod)
	}
	podSpec.WithSecurityContext(podSecurity)

	spec := appsv1ac.DeploymentSpec()
	if gw.Standby {
		standbyDeployment(gw, spec, podSpec)
	} else {
		spec.WithReplicas(1).
			// Never two gateway pods at once: they would fight over the public address and the
			// peers' tunnels.
			WithStrategy(appsv1ac.DeploymentStrategy().WithType(appsv1.RecreateDeploymentStrategyType))
	}
	return appsv1ac.Deployment(nameOf(gw), gw.Namespace).
		WithLabels(labelsOf(gw)).
		WithOwnerReferences(ownerRef(owner)).
		WithSpec(spec.
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(selectorOf(gw))).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(labelsOf(gw)).
				WithSpec(podSpec)))
}

// agentRunArgs are the agent sidecar's arguments: where it runs (placementArgs; a legacy
// gateway's agent is told its kind, and reports tunnels to the IPsecGateway's status), its
// ConfigMap and its metrics address.
func agentRunArgs(gw *model.Gateway, opts Options) []string {
	args := append([]string{"run"}, placementArgs(gw)...)
	return append(args, "--config-map", configMapNameOf(gw), "--metrics-addr", ":"+strconv.Itoa(int(opts.MetricsPort)))
}

// placementArgs tell the agent (and its init step) what it must not take from the model:
// which gateway it serves, whether its pod is on the node's network, the node (the downward
// API's spec.nodeName, NODE_NAME) and the service CIDR. A model that disagrees is refused
// (model.Placement).
func placementArgs(gw *model.Gateway) []string {
	args := []string{"--gateway", gw.Name, "--namespace", gw.Namespace}
	if gw.Kind == model.KindIPsecGateway {
		args = append(args, "--gateway-kind", gw.Kind)
	}
	args = append(args, "--host-network="+strconv.FormatBool(gw.Endpoint.Kind == model.EndpointHostNetwork), "--node-name=$(NODE_NAME)")
	if gw.ServiceCIDR.IsValid() {
		args = append(args, "--service-cidr", gw.ServiceCIDR.String())
	}
	if gw.Endpoint.MovingAddress() {
		args = append(args, "--vip", gw.Endpoint.HostAddress.String())
	}
	return args
}

// hostNodes are the nodes a host-network gateway's pods may run on.
func hostNodes(gw *model.Gateway) []string {
	if len(gw.Endpoint.NodeNames) > 0 {
		return gw.Endpoint.NodeNames
	}
	return []string{gw.Endpoint.NodeName}
}

// nodeNameEnv is NODE_NAME, the node the pod runs on, from the downward API. The field
// selector's apiVersion is spelled out, as the API server would default it, so the live
// Deployment compares equal to its rendering.
func nodeNameEnv() *corev1ac.EnvVarApplyConfiguration {
	return corev1ac.EnvVar().WithName("NODE_NAME").WithValueFrom(corev1ac.EnvVarSource().
		WithFieldRef(corev1ac.ObjectFieldSelector().WithAPIVersion("v1").WithFieldPath("spec.nodeName")))
}
