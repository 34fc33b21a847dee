package children

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// LabelReverseExposure marks a reverse exposure's Service with the exposure's name.
const LabelReverseExposure = "vpn.bnerd.net/reverse-exposure"

// ReverseServiceName is the ClusterIP Service through which in-cluster clients reach a
// reverse exposure: <gateway>-<exposure> (admission keeps it within 63 characters).
func ReverseServiceName(gateway, exposure string) string { return gateway + "-" + exposure }

// ReverseServicePorts are a reverse exposure's Service ports as the status shows them:
// "5432/TCP", in the exposure's order.
func ReverseServicePorts(r model.ReverseExposure) []string {
	out := make([]string, len(r.Ports))
	for i, p := range r.Ports {
		out[i] = fmt.Sprintf("%d/%s", p.Port, strings.ToUpper(p.Protocol))
	}
	return out
}

// renderReverseServices renders one ClusterIP Service per reverse exposure. Each selects the
// gateway pod; its ports are the exposure's ports (what clients connect to), each sent to the
// gateway port allocated for it, where the gateway's ruleset DNATs the traffic into the
// tunnel. Who may connect is decided by the gateway's NetworkPolicy and ruleset, not here.
func renderReverseServices(gw *model.Gateway, owner metav1.OwnerReference) []*corev1ac.ServiceApplyConfiguration {
	out := make([]*corev1ac.ServiceApplyConfiguration, 0, len(gw.ReverseExposures))
	for _, r := range gw.ReverseExposures {
		labels := labelsOf(gw)
		labels[LabelReverseExposure] = r.Name
		spec := corev1ac.ServiceSpec().
			WithType(corev1.ServiceTypeClusterIP).
			// The tunnels do not depend on the agent's readiness (see the load balancer's
			// Service): a restarting agent keeps the exposure reachable.
			WithPublishNotReadyAddresses(true).
			WithSelector(selectorOf(gw))
		for _, p := range r.Ports {
			proto := corev1.ProtocolTCP
			if p.Protocol == "udp" {
				proto = corev1.ProtocolUDP
			}
			spec.WithPorts(corev1ac.ServicePort().
				WithName(fmt.Sprintf("%s-%d", p.Protocol, p.Port)).
				WithProtocol(proto).
				WithPort(int32(p.Port)).
				WithTargetPort(intstr.FromInt32(int32(p.GatewayPort))))
		}
		out = append(out, corev1ac.Service(ReverseServiceName(gw.Name, r.Name), gw.Namespace).
			WithLabels(labels).
			WithOwnerReferences(ownerRef(owner)).
			WithSpec(spec))
	}
	return out
}
