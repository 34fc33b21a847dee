package children

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// renderNetworkPolicy admits, into the gateway pod:
//   - the tunnel's ports from anywhere (IPsec: UDP 500 and 4500; WireGuard: its listen port),
//   - the reverse exposures' gateway ports from the pods of the gateway's own namespace and of
//     the namespaces spec.reverseExposureNamespaces selects (the tenant; the gateway's ruleset
//     admits exactly those pods' addresses too),
//   - the metrics port (TCP) from the pods of the namespaces the admin selects
//     (MetricsNamespaceSelector: by default the operator's and "monitoring"); the kubelet's
//     probes come from the node, which NetworkPolicy implementations admit,
//   - with a standby, the metrics port (TCP) from the gateway's own pods (standbyProbeRule).
//
// Egress is not restricted. IPsec is always UDP-encapsulated here: a gateway pod sits behind
// NAT (floating IP or load balancer), and NetworkPolicy cannot express raw ESP anyway.
// Traffic inside the tunnels is decapsulated in the pod's own network namespace and is
// policed there by the agent's nftables ruleset (per-peer authorization), not by this policy.
//
// For hostNetwork gateways the policy is rendered too, but it has no effect: NetworkPolicy
// does not apply to host-network pods. It is kept so the children are the same set for every
// endpoint kind (and so it takes effect should the gateway move off the host network).
func renderNetworkPolicy(gw *model.Gateway, owner metav1.OwnerReference, opts Options) *networkingv1ac.NetworkPolicyApplyConfiguration {
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	port := func(proto corev1.Protocol, p int32) *networkingv1ac.NetworkPolicyPortApplyConfiguration {
		return networkingv1ac.NetworkPolicyPort().WithProtocol(proto).WithPort(intstr.FromInt32(p))
	}

	var tunnel *networkingv1ac.NetworkPolicyIngressRuleApplyConfiguration
	switch gw.Protocol {
	case model.ProtocolIPsec:
		tunnel = networkingv1ac.NetworkPolicyIngressRule().WithPorts(port(udp, IKEPort), port(udp, NATTPort))
	case model.ProtocolWireGuard:
		tunnel = networkingv1ac.NetworkPolicyIngressRule().WithPorts(port(udp, int32(gw.WireGuard.ListenPort)))
	}
	// No "from": the peers connect from anywhere.
	rules := []*networkingv1ac.NetworkPolicyIngressRuleApplyConfiguration{tunnel}

	if len(gw.ReverseExposures) > 0 {
		reverse := networkingv1ac.NetworkPolicyIngressRule().WithFrom(
			networkingv1ac.NetworkPolicyPeer().WithNamespaceSelector(metav1ac.LabelSelector().
				WithMatchLabels(map[string]string{corev1.LabelMetadataName: gw.Namespace})))
		if sel := gw.ReverseClientNamespaces; sel != nil {
			reverse.WithFrom(networkingv1ac.NetworkPolicyPeer().WithNamespaceSelector(labelSelector(sel)))
		}
		// The ready ClusterLinks' ranges: a service cluster's workloads, routed over the fabric.
		for _, r := range gw.Routes {
			reverse.WithFrom(networkingv1ac.NetworkPolicyPeer().WithIPBlock(networkingv1ac.IPBlock().WithCIDR(r.CIDR.String())))
		}
		for _, r := range gw.ReverseExposures {
			for _, p := range r.Ports {
				proto := tcp
				if p.Protocol == "udp" {
					proto = udp
				}
				reverse.WithPorts(port(proto, int32(p.GatewayPort)))
			}
		}
		rules = append(rules, reverse)
	}

	rules = append(rules, networkingv1ac.NetworkPolicyIngressRule().
		WithPorts(port(tcp, opts.MetricsPort)).
		WithFrom(networkingv1ac.NetworkPolicyPeer().WithNamespaceSelector(labelSelector(MetricsNamespaceSelector(opts)))))
	if gw.Standby {
		rules = append(rules, standbyProbeRule(gw, opts.MetricsPort))
	}

	return networkingv1ac.NetworkPolicy(nameOf(gw), gw.Namespace).
		WithLabels(labelsOf(gw)).
		WithOwnerReferences(ownerRef(owner)).
		WithSpec(networkingv1ac.NetworkPolicySpec().
			WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(selectorOf(gw))).
			WithPolicyTypes(networkingv1.PolicyTypeIngress).
			WithIngress(rules...))
}

// labelSelector is sel as an apply configuration.
func labelSelector(sel *metav1.LabelSelector) *metav1ac.LabelSelectorApplyConfiguration {
	out := metav1ac.LabelSelector()
	if len(sel.MatchLabels) > 0 {
		out.WithMatchLabels(sel.MatchLabels)
	}
	for _, req := range sel.MatchExpressions {
		out.WithMatchExpressions(metav1ac.LabelSelectorRequirement().
			WithKey(req.Key).WithOperator(req.Operator).WithValues(req.Values...))
	}
	return out
}
