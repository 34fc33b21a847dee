// Package children renders a validated gateway model into the gateway's Kubernetes children
// (ServiceAccount, Role, RoleBinding, ConfigMap, Deployment, NetworkPolicy; with a standby a
// PodDisruptionBudget and a Lease) as client-go apply configurations, for server-side apply
// by the reconciler.
//
// Everything here is pure: no I/O, no clocks, no randomness. The same model and options always
// render byte-identical objects, so an unchanged gateway never produces a diff.
//
// Secrets: the model only holds references to secret data (name and key), and so does
// everything rendered here. The gateway agent reads secret values itself, through a Role that
// names exactly the Secrets the gateway's peers reference.
package children

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	coordinationv1ac "k8s.io/client-go/applyconfigurations/coordination/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// Label keys put on every child and on the gateway pod.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelGateway   = "vpn.bnerd.net/gateway"

	// AppName is the value of LabelName.
	AppName = "vpn-gateway"
	// ManagedBy is the value of LabelManagedBy.
	ManagedBy = "bnerd-vpn-operator"
)

// ConfigMap layout and where the gateway pod sees it.
const (
	// ModelKey is the ConfigMap data key holding the model as indented JSON.
	ModelKey = "model.json"
	// ConfigDir is where the ConfigMap is mounted (read-only) in the agent containers.
	ConfigDir = "/etc/vpn-gateway"
	// ModelPath is the model file inside the pod.
	ModelPath = ConfigDir + "/" + ModelKey
	// StrongSwanRunDir is the emptyDir shared by charon and the agent (the VICI socket).
	StrongSwanRunDir = "/run/strongswan"
	// WireGuardRunDir is the emptyDir where the embedded wireguard-go opens its UAPI socket
	// (<iface>.sock, the place wgctrl and `wg` look); the root filesystem is read-only.
	WireGuardRunDir = "/var/run/wireguard"
	// TunDevice is the TUN device a userspace dataplane needs.
	TunDevice = "/dev/net/tun"
	// ServiceAccountDir is where the agent container, and only it, finds its API credentials
	// (the standard in-cluster location: token, ca.crt, namespace).
	ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	// StrongSwanKernelConf is charon's configuration for kernel ESP in the gateway image: the
	// image's default (/etc/strongswan.conf) loads kernel-libipsec (userspace ESP); this one
	// does not, so kernel-netlink installs XFRM states and policies. Selected by STRONGSWAN_CONF
	// unless the install runs a userspace dataplane.
	StrongSwanKernelConf = "/etc/strongswan-kernel.conf"
	// AgentCommand is the gateway agent binary in AgentImage.
	AgentCommand = "/gateway-agent"
)

// Container, volume and port names in the gateway pod.
const (
	ContainerAgentInit = "agent-init"
	ContainerAgent     = "agent"
	ContainerCharon    = "charon"
	// ContainerWireGuard runs the userspace WireGuard device (userspace dataplane only).
	ContainerWireGuard = "wireguard"

	VolumeConfig        = "config"
	VolumeStrongSwanRun = "strongswan-run"
	VolumeWireGuardRun  = "wireguard-run"
	VolumeTun           = "dev-net-tun"
	VolumeAPIAccess     = "kube-api-access"

	PortMetrics   = "metrics"
	PortIKE       = "ike"
	PortNATT      = "ike-natt"
	PortWireGuard = "wireguard"
)

// IPsec's fixed UDP ports (IKE and NAT traversal / UDP-encapsulated ESP).
const (
	IKEPort  int32 = 500
	NATTPort int32 = 4500
)

// DefaultMetricsPort is used when Options.MetricsPort is zero.
const DefaultMetricsPort int32 = 9090

// Options are the operator-wide settings that shape every gateway's children.
type Options struct {
	// AgentImage runs the gateway agent (init step and sidecar). Required.
	AgentImage string
	// StrongSwanImage runs charon. Required for IPsec gateways, unused for WireGuard.
	StrongSwanImage string
	// ImagePullPolicy for every container; empty leaves the Kubernetes default.
	ImagePullPolicy corev1.PullPolicy
	// UserspaceDataplane mounts /dev/net/tun (hostPath, CharDevice) into the container that
	// runs the dataplane: charon for IPsec (kernel-libipsec plugin, userspace ESP), the agent
	// for WireGuard (embedded wireguard-go). Needed wherever the kernel lacks ESP or the
	// WireGuard module.
	UserspaceDataplane bool
	// MetricsPort the agent serves /metrics, /healthz and /readyz on (TCP); 0 means 9090.
	MetricsPort int32
	// OperatorNamespace is where the operator runs; with DefaultMonitoringNamespace, the
	// namespaces whose pods may reach the agent's metrics port when MetricsNamespaces is nil.
	OperatorNamespace string
	// MetricsNamespaces selects the namespaces whose pods may reach the agent's metrics port
	// (the gateway NetworkPolicy's metrics rule). Nil: the operator's namespace and
	// DefaultMonitoringNamespace; an empty selector: every namespace.
	MetricsNamespaces *metav1.LabelSelector
	// Pod is the cluster admin's placement and sizing of every gateway pod.
	Pod PodSettings
}

// PodSettings place and size gateway pods: operator settings, the same for every gateway.
type PodSettings struct {
	// NodeSelector the pods must match (a host-network gateway is pinned to its node as well).
	NodeSelector map[string]string
	// Tolerations of the pods, beyond Kubernetes' defaults.
	Tolerations []corev1.Toleration
	// PriorityClassName of the pods; empty: the cluster's default.
	PriorityClassName string
	// ImagePullSecrets (in each gateway's namespace) to pull the gateway images with.
	ImagePullSecrets []string
	// Resources of each container; nil: DefaultResources.
	Resources *corev1.ResourceRequirements
	// NodeLossToleration is how long a pod-network gateway's pod stays bound to a node that is
	// not ready or unreachable before Kubernetes evicts it and its Deployment starts another on a
	// healthy node (NoExecute tolerations of node.kubernetes.io/not-ready and unreachable);
	// zero leaves Kubernetes' default, 300 s. Tolerations of those taints among Tolerations win.
	// A host-network gateway is pinned to its node and keeps the default.
	NodeLossToleration time.Duration
}

// DefaultResources are each gateway container's requests and limits unless the admin sets
// others (PodSettings.Resources).
func DefaultResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("50m"),
			corev1.ResourceMemory: resource.MustParse("64Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("256Mi"),
		},
	}
}

// DefaultMonitoringNamespace is where a cluster's Prometheus usually runs: its pods may scrape
// the gateway agents unless the admin selects other namespaces (Options.MetricsNamespaces).
const DefaultMonitoringNamespace = "monitoring"

// MetricsNamespaceSelector is the selector of the namespaces whose pods may reach the agent's
// metrics port under opts (Options.MetricsNamespaces).
func MetricsNamespaceSelector(opts Options) *metav1.LabelSelector {
	if opts.MetricsNamespaces != nil {
		return opts.MetricsNamespaces
	}
	names := []string{DefaultMonitoringNamespace}
	if opts.OperatorNamespace != "" && opts.OperatorNamespace != DefaultMonitoringNamespace {
		names = []string{opts.OperatorNamespace, DefaultMonitoringNamespace}
	}
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: names,
	}}}
}

// Children are a gateway's rendered Kubernetes objects. All of them are always set, except
// ReverseServices, one per reverse exposure, and PodDisruptionBudget and Lease, set for a
// gateway with a standby only.
type Children struct {
	ServiceAccount  *corev1ac.ServiceAccountApplyConfiguration
	Role            *rbacv1ac.RoleApplyConfiguration
	RoleBinding     *rbacv1ac.RoleBindingApplyConfiguration
	ConfigMap       *corev1ac.ConfigMapApplyConfiguration
	Deployment      *appsv1ac.DeploymentApplyConfiguration
	NetworkPolicy   *networkingv1ac.NetworkPolicyApplyConfiguration
	ReverseServices []*corev1ac.ServiceApplyConfiguration
	// PodDisruptionBudget keeps a drain from evicting both pods of a gateway with a standby.
	PodDisruptionBudget *policyv1ac.PodDisruptionBudgetApplyConfiguration
	// Lease elects the active pod of a gateway with a standby. The operator creates it; its
	// holder and renew time are the agents' alone, so it is not applied as the other children
	// are (see the controller).
	Lease *coordinationv1ac.LeaseApplyConfiguration
}

// Objects returns the children in a fixed apply order: identity and permissions first, then
// the configuration, then the workload that consumes them, then its network policy, then the
// reverse exposures' Services, then, with a standby, the PodDisruptionBudget and the Lease.
func (c *Children) Objects() []runtime.ApplyConfiguration {
	out := []runtime.ApplyConfiguration{
		c.ServiceAccount, c.Role, c.RoleBinding, c.ConfigMap, c.Deployment, c.NetworkPolicy,
	}
	for _, s := range c.ReverseServices {
		out = append(out, s)
	}
	if c.PodDisruptionBudget != nil {
		out = append(out, c.PodDisruptionBudget)
	}
	if c.Lease != nil {
		out = append(out, c.Lease)
	}
	return out
}

// Name is the name of every child of a VPNGateway except the ConfigMap:
// the ServiceAccount, Role, RoleBinding, Deployment and NetworkPolicy.
func Name(gateway string) string { return gateway + "-gateway" }

// ConfigMapName is the name of a VPNGateway's ConfigMap.
func ConfigMapName(gateway string) string { return gateway + "-gateway-config" }

// Labels are put on every child of a VPNGateway and on its pod.
func Labels(gateway string) map[string]string {
	return map[string]string{
		LabelName:      AppName,
		LabelInstance:  gateway,
		LabelManagedBy: ManagedBy,
		LabelGateway:   gateway,
	}
}

// SelectorLabels select a VPNGateway's pod (Deployment selector, NetworkPolicy podSelector).
func SelectorLabels(gateway string) map[string]string {
	return map[string]string{
		LabelInstance: gateway,
		LabelGateway:  gateway,
	}
}

// A legacy IPsecGateway's children live next to those of a VPNGateway of the same name (the
// migration runs both for a while): they carry a suffix no VPNGateway child name ends with
// (VPNGateway: "-gateway", "-gateway-config"; IPsecGateway: "-ipsecgw", "-ipsecgw-config"),
// and their pod is labelled with LabelIPsecGateway instead of LabelGateway, so no selector
// of one kind matches the other kind's pod. Reverse-exposure Services keep
// "<gateway>-<exposure>" for both kinds: in-cluster clients keep the name across a
// migration, and the operator never takes a Service another gateway owns.
const (
	// LabelIPsecGateway names a legacy IPsecGateway on its children and pod.
	LabelIPsecGateway = "ipsec.bnerd.net/gateway"
	legacySuffix      = "-ipsecgw"
)

// NameFor is Name for a gateway of the given model kind (empty: VPNGateway).
func NameFor(kind, gateway string) string {
	if kind == model.KindIPsecGateway {
		return gateway + legacySuffix
	}
	return Name(gateway)
}

// ConfigMapNameFor is ConfigMapName for a gateway of the given model kind.
func ConfigMapNameFor(kind, gateway string) string {
	if kind == model.KindIPsecGateway {
		return gateway + legacySuffix + "-config"
	}
	return ConfigMapName(gateway)
}

// GatewayLabelFor is the label key naming a gateway of the given model kind on its children.
func GatewayLabelFor(kind string) string {
	if kind == model.KindIPsecGateway {
		return LabelIPsecGateway
	}
	return LabelGateway
}

// LabelsFor is Labels for a gateway of the given model kind.
func LabelsFor(kind, gateway string) map[string]string {
	if kind != model.KindIPsecGateway {
		return Labels(gateway)
	}
	return map[string]string{
		LabelName:         AppName,
		LabelInstance:     NameFor(kind, gateway),
		LabelManagedBy:    ManagedBy,
		LabelIPsecGateway: gateway,
	}
}

// SelectorLabelsFor is SelectorLabels for a gateway of the given model kind.
func SelectorLabelsFor(kind, gateway string) map[string]string {
	if kind != model.KindIPsecGateway {
		return SelectorLabels(gateway)
	}
	return map[string]string{
		LabelInstance:     NameFor(kind, gateway),
		LabelIPsecGateway: gateway,
	}
}

func nameOf(gw *model.Gateway) string          { return NameFor(gw.Kind, gw.Name) }
func configMapNameOf(gw *model.Gateway) string { return ConfigMapNameFor(gw.Kind, gw.Name) }
func labelsOf(gw *model.Gateway) map[string]string {
	return LabelsFor(gw.Kind, gw.Name)
}
func selectorOf(gw *model.Gateway) map[string]string { return SelectorLabelsFor(gw.Kind, gw.Name) }

// Render turns a validated gateway into its children. owner is the controller reference to
// the gateway's custom resource and is set on every child. Invalid input is an error, never a
// panic and never a partial result.
func Render(gw *model.Gateway, owner metav1.OwnerReference, opts Options) (*Children, error) {
	if err := validate(gw, owner, &opts); err != nil {
		return nil, err
	}
	cm, err := renderConfigMap(gw, owner)
	if err != nil {
		return nil, err
	}
	c := &Children{
		ServiceAccount:  renderServiceAccount(gw, owner),
		Role:            renderRole(gw, owner),
		RoleBinding:     renderRoleBinding(gw, owner),
		ConfigMap:       cm,
		Deployment:      renderDeployment(gw, owner, opts),
		NetworkPolicy:   renderNetworkPolicy(gw, owner, opts),
		ReverseServices: renderReverseServices(gw, owner),
	}
	if gw.Standby {
		c.PodDisruptionBudget = renderPodDisruptionBudget(gw, owner)
		c.Lease = renderLease(gw, owner)
	}
	return c, nil
}

// validate checks everything Render relies on and fills in option defaults.
func validate(gw *model.Gateway, owner metav1.OwnerReference, opts *Options) error {
	if gw == nil {
		return errors.New("render children: gateway model is nil")
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	switch {
	case gw.Name == "":
		bad("gateway name is empty")
	default:
		// The gateway name is a label value and part of every child's name.
		for _, msg := range validation.IsValidLabelValue(gw.Name) {
			bad("gateway name %q is not a valid label value: %s", gw.Name, msg)
		}
		for _, msg := range validation.IsDNS1123Subdomain(configMapNameOf(gw)) {
			bad("child name %q is invalid: %s", configMapNameOf(gw), msg)
		}
	}
	if gw.Namespace == "" {
		bad("gateway namespace is empty")
	} else {
		for _, msg := range validation.IsDNS1123Label(gw.Namespace) {
			bad("gateway namespace %q is invalid: %s", gw.Namespace, msg)
		}
	}

	switch gw.Protocol {
	case model.ProtocolIPsec:
		if gw.IPsec == nil {
			bad("ipsec gateway has no ipsec settings")
		}
		if gw.WireGuard != nil {
			bad("ipsec gateway has wireguard settings")
		}
		if opts.StrongSwanImage == "" {
			bad("options: strongSwan image is required for ipsec gateways")
		}
	case model.ProtocolWireGuard:
		if gw.WireGuard == nil {
			bad("wireguard gateway has no wireguard settings")
		} else {
			if gw.WireGuard.ListenPort == 0 {
				bad("wireguard listen port is 0")
			}
			if gw.WireGuard.PrivateKey.Name == "" || gw.WireGuard.PrivateKey.Key == "" {
				bad("wireguard private key secret reference is incomplete")
			}
		}
		if gw.IPsec != nil {
			bad("wireguard gateway has ipsec settings")
		}
	default:
		bad("unknown protocol %q", gw.Protocol)
	}

	if ep := gw.Endpoint; ep.Kind == model.EndpointHostNetwork {
		switch {
		case len(ep.NodeNames) > 0 && ep.NodeName != "":
			bad("hostNetwork endpoint has both a node name and nodes")
		case len(ep.NodeNames) == 0 && ep.NodeName == "":
			bad("hostNetwork endpoint has no node name")
		case len(ep.NodeNames) == 1:
			bad("hostNetwork endpoint has one node in nodes; a standby needs two")
		case len(ep.NodeNames) > 0 && !ep.HostAddress.Is4():
			bad("hostNetwork endpoint on nodes %v has no IPv4 VIP", ep.NodeNames)
		case len(ep.NodeNames) > 0 && !gw.Standby:
			bad("hostNetwork endpoint on nodes %v without a standby", ep.NodeNames)
		}
		for _, n := range ep.NodeNames {
			if n == "" {
				bad("hostNetwork endpoint names an empty node")
			}
		}
	}
	if gw.Standby && gw.Endpoint.Kind != model.EndpointLoadBalancer && !gw.Endpoint.MovingAddress() {
		bad("a standby needs a loadBalancer endpoint, or a hostNetwork endpoint with nodes and a VIP, not %q", gw.Endpoint.Kind)
	}
	for i, p := range gw.InternalSourceCIDRs {
		if !p.IsValid() {
			bad("internalSourceCIDRs[%d] is invalid", i)
		}
	}
	for i, r := range gw.Routes {
		if !r.CIDR.IsValid() || !r.CIDR.Addr().Is4() || !r.Via.Is4() || !slices.Contains(gw.InternalSourceCIDRs, r.CIDR) {
			bad("routes[%d] (ClusterLink %q) is not an IPv4 range with an IPv4 next hop among the internal sources", i, r.Link)
		}
	}
	for _, r := range gw.ReverseExposures {
		for _, msg := range validation.IsDNS1035Label(ReverseServiceName(gw.Name, r.Name)) {
			bad("reverse exposure %q: Service name %q is invalid: %s", r.Name, ReverseServiceName(gw.Name, r.Name), msg)
		}
		for _, p := range r.Ports {
			if p.GatewayPort == 0 || p.Port == 0 || (p.Protocol != "tcp" && p.Protocol != "udp") {
				bad("reverse exposure %q: port %+v is incomplete", r.Name, p)
			}
		}
	}
	if sel := gw.ReverseClientNamespaces; sel != nil {
		if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
			bad("reverse client namespaces: %v", err)
		}
	}

	seen := map[string]bool{}
	for i, p := range gw.Peers {
		if p.Name == "" {
			bad("peers[%d] has no name", i)
			continue
		}
		if seen[p.Name] {
			bad("peer %q appears twice", p.Name)
		}
		seen[p.Name] = true
		switch gw.Protocol {
		case model.ProtocolIPsec:
			if p.IPsec == nil {
				bad("peer %q of an ipsec gateway has no ipsec settings", p.Name)
			} else if p.IPsec.PSK.Name == "" || p.IPsec.PSK.Key == "" {
				bad("peer %q: psk secret reference is incomplete", p.Name)
			}
		case model.ProtocolWireGuard:
			if p.WireGuard == nil {
				bad("peer %q of a wireguard gateway has no wireguard settings", p.Name)
			} else if k := p.WireGuard.PresharedKey; k != nil && (k.Name == "" || k.Key == "") {
				bad("peer %q: preshared key secret reference is incomplete", p.Name)
			}
		}
	}

	if owner.APIVersion == "" || owner.Kind == "" || owner.Name == "" || owner.UID == "" {
		bad("owner reference needs apiVersion, kind, name and uid")
	}
	switch {
	case gw.Kind != "" && gw.Kind != model.KindIPsecGateway:
		bad("unknown gateway kind %q", gw.Kind)
	case gw.Kind == model.KindIPsecGateway && gw.Protocol != model.ProtocolIPsec:
		bad("an %s is an ipsec gateway", model.KindIPsecGateway)
	case owner.Kind != "" && owner.Kind != kindOrVPN(gw.Kind):
		// A child owned by the other kind would be garbage-collected with the wrong object.
		bad("owner reference is a %s, the gateway a %s", owner.Kind, kindOrVPN(gw.Kind))
	case owner.Name != "" && owner.Name != gw.Name:
		bad("owner reference names %q, the gateway is %q", owner.Name, gw.Name)
	}
	if owner.Controller == nil || !*owner.Controller {
		bad("owner reference must be a controller reference")
	}

	if opts.AgentImage == "" {
		bad("options: agent image is required")
	}
	switch opts.ImagePullPolicy {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		bad("options: unknown image pull policy %q", opts.ImagePullPolicy)
	}
	if opts.MetricsPort == 0 {
		opts.MetricsPort = DefaultMetricsPort
	}
	if opts.MetricsPort < 1 || opts.MetricsPort > 65535 {
		bad("options: metrics port %d out of range", opts.MetricsPort)
	}
	if opts.OperatorNamespace != "" {
		for _, msg := range validation.IsDNS1123Label(opts.OperatorNamespace) {
			bad("options: operator namespace %q is invalid: %s", opts.OperatorNamespace, msg)
		}
	}
	if opts.MetricsNamespaces != nil {
		if _, err := metav1.LabelSelectorAsSelector(opts.MetricsNamespaces); err != nil {
			bad("options: metrics namespace selector: %v", err)
		}
	}

	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return fmt.Errorf("render children of gateway %s/%s: %s", nsOf(gw), gw.Name, strings.Join(msgs, "; "))
}

func kindOrVPN(kind string) string {
	if kind == "" {
		return "VPNGateway"
	}
	return kind
}

func nsOf(gw *model.Gateway) string {
	if gw.Namespace == "" {
		return "<no namespace>"
	}
	return gw.Namespace
}

func ownerRef(o metav1.OwnerReference) *metav1ac.OwnerReferenceApplyConfiguration {
	ref := metav1ac.OwnerReference().
		WithAPIVersion(o.APIVersion).
		WithKind(o.Kind).
		WithName(o.Name).
		WithUID(o.UID)
	if o.Controller != nil {
		ref.WithController(*o.Controller)
	}
	if o.BlockOwnerDeletion != nil {
		ref.WithBlockOwnerDeletion(*o.BlockOwnerDeletion)
	}
	return ref
}

func renderServiceAccount(gw *model.Gateway, owner metav1.OwnerReference) *corev1ac.ServiceAccountApplyConfiguration {
	return corev1ac.ServiceAccount(nameOf(gw), gw.Namespace).
		WithLabels(labelsOf(gw)).
		WithOwnerReferences(ownerRef(owner)).
		// The agent talks to the API server (its ConfigMap, Secrets, peers' status, events).
		WithAutomountServiceAccountToken(true)
}

func renderConfigMap(gw *model.Gateway, owner metav1.OwnerReference) (*corev1ac.ConfigMapApplyConfiguration, error) {
	// The model holds secret references only (model.SecretKeyRef), never secret data.
	doc, err := json.MarshalIndent(gw, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("render children of gateway %s/%s: marshal model: %w", gw.Namespace, gw.Name, err)
	}
	return corev1ac.ConfigMap(configMapNameOf(gw), gw.Namespace).
		WithLabels(labelsOf(gw)).
		WithOwnerReferences(ownerRef(owner)).
		WithData(map[string]string{ModelKey: string(doc) + "\n"}), nil
}
