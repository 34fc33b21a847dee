package children

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	coordinationv1ac "k8s.io/client-go/applyconfigurations/coordination/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// A gateway with a standby (model.Gateway.Standby) runs two pods on different nodes. Their
// agents elect the active one through the gateway's Lease (ActiveLeaseNameFor): the holder
// carries the tunnels, the other is fully configured but fenced, and takes the Lease over when
// the active fails or hands it over. The operator labels the holder (LabelRole: RoleActive),
// and the gateway's public Service selects only that pod.
const (
	// LabelRole on a gateway pod with a standby: RoleActive on the pod holding the Lease,
	// absent on the others. Set by the operator only.
	LabelRole = "vpn.bnerd.net/role"
	// RoleActive is LabelRole's value on the active pod.
	RoleActive = "active"
	// AnnotationLeaseMembers on the Lease (written by the agents): JSON {"<pod>": "<pod IP>"}
	// of the gateway's pods, so each finds the other.
	AnnotationLeaseMembers = "vpn.bnerd.net/members"
	// AnnotationLastTakeover on the Lease (written by the agent that took over): JSON
	// {"time", "from", "to", "reason", "outageMillis"} of the last takeover.
	AnnotationLastTakeover = "vpn.bnerd.net/last-takeover"
	// LeaseDurationSeconds is the Lease's spec.leaseDurationSeconds at creation: the active
	// renews it every 500 ms.
	LeaseDurationSeconds int32 = 2
	// ActiveDeletionCost and StandbyDeletionCost are the pods' pod-deletion-cost
	// (corev1.PodDeletionCost): a scale-down or rollout removes the standby first.
	ActiveDeletionCost  = "1000"
	StandbyDeletionCost = "-1000"
	// StandbyReplicas is the Deployment's replicas with a standby: the active and one standby.
	StandbyReplicas int32 = 2
	// activeLeaseSuffix ends the Lease's name.
	activeLeaseSuffix = "-active"
	// hostnameTopologyKey spreads the two pods over nodes.
	hostnameTopologyKey = corev1.LabelHostname
)

// ActiveLeaseNameFor is the name of the Lease electing the active pod of a gateway of the
// given model kind: NameFor + "-active".
func ActiveLeaseNameFor(kind, gateway string) string {
	return NameFor(kind, gateway) + activeLeaseSuffix
}

// GatewayOfActiveLease is the inverse of ActiveLeaseNameFor: the model kind and name of the
// gateway a Lease of that name elects for; ok is false for any other name. The name is the
// only thing about a Lease its writers cannot change (the agents may update its labels).
func GatewayOfActiveLease(lease string) (kind, gateway string, ok bool) {
	base, found := strings.CutSuffix(lease, activeLeaseSuffix)
	if !found {
		return "", "", false
	}
	if g, found := strings.CutSuffix(base, legacySuffix); found && g != "" {
		return model.KindIPsecGateway, g, true
	}
	if g, found := strings.CutSuffix(base, "-gateway"); found && g != "" {
		return "", g, true
	}
	return "", "", false
}

// renderLease is the gateway's Lease as the operator creates it: its name, labels, owner and
// lease duration. Its holder and renew time are the agents' (the operator never writes them).
func renderLease(gw *model.Gateway, owner metav1.OwnerReference) *coordinationv1ac.LeaseApplyConfiguration {
	return coordinationv1ac.Lease(ActiveLeaseNameFor(gw.Kind, gw.Name), gw.Namespace).
		WithLabels(labelsOf(gw)).
		WithOwnerReferences(ownerRef(owner)).
		WithSpec(coordinationv1ac.LeaseSpec().WithLeaseDurationSeconds(LeaseDurationSeconds))
}

// renderPodDisruptionBudget lets a drain evict one of the gateway's two pods at a time, so a
// standby is left to take over. A pod that is not ready (a standby that cannot start) does not
// block the drain (AlwaysAllow).
func renderPodDisruptionBudget(gw *model.Gateway, owner metav1.OwnerReference) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	return policyv1ac.PodDisruptionBudget(nameOf(gw), gw.Namespace).
		WithLabels(labelsOf(gw)).
		WithOwnerReferences(ownerRef(owner)).
		WithSpec(policyv1ac.PodDisruptionBudgetSpec().
			WithMaxUnavailable(intstr.FromInt32(1)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(selectorOf(gw))).
			WithUnhealthyPodEvictionPolicy(policyv1.AlwaysAllow))
}

// standbyAgent tells the agent of a gateway with a standby its Lease, and its pod's name (its
// identity in the Lease) and address (where the other pod probes it), from the downward API.
func standbyAgent(gw *model.Gateway, agent *corev1ac.ContainerApplyConfiguration) {
	agent.WithArgs("--standby-lease=" + ActiveLeaseNameFor(gw.Kind, gw.Name))
	agent.WithEnv(
		corev1ac.EnvVar().WithName("POD_NAME").WithValueFrom(corev1ac.EnvVarSource().
			WithFieldRef(corev1ac.ObjectFieldSelector().WithAPIVersion("v1").WithFieldPath("metadata.name"))),
		corev1ac.EnvVar().WithName("POD_IP").WithValueFrom(corev1ac.EnvVarSource().
			WithFieldRef(corev1ac.ObjectFieldSelector().WithAPIVersion("v1").WithFieldPath("status.podIP"))),
	)
}

// standbyDeployment makes the Deployment run an active and a standby pod: two replicas on
// different nodes (required anti-affinity among the gateway's pods), replaced one at a time
// without a third (maxSurge 0: the node's tunnel ports and the gateway's Lease know two pods).
//
// A host-network gateway's node affinity (its nodes) is kept beside the anti-affinity.
func standbyDeployment(gw *model.Gateway, spec *appsv1ac.DeploymentSpecApplyConfiguration, podSpec *corev1ac.PodSpecApplyConfiguration) {
	if podSpec.Affinity == nil {
		podSpec.WithAffinity(corev1ac.Affinity())
	}
	podSpec.Affinity.WithPodAntiAffinity(corev1ac.PodAntiAffinity().
		WithRequiredDuringSchedulingIgnoredDuringExecution(corev1ac.PodAffinityTerm().
			WithLabelSelector(metav1ac.LabelSelector().WithMatchLabels(selectorOf(gw))).
			WithTopologyKey(hostnameTopologyKey)))
	spec.WithReplicas(StandbyReplicas).
		WithStrategy(appsv1ac.DeploymentStrategy().
			WithType(appsv1.RollingUpdateDeploymentStrategyType).
			WithRollingUpdate(appsv1ac.RollingUpdateDeployment().
				WithMaxSurge(intstr.FromInt32(0)).
				WithMaxUnavailable(intstr.FromInt32(1))))
}

// standbyLeaseRule lets the agents elect through the gateway's Lease: read it and write it,
// by name. list and watch with resourceNames authorize only requests scoped to that one
// object (fieldSelector metadata.name=<lease>), which is how the agents watch it; the
// operator creates it, so there is no create.
func standbyLeaseRule(gw *model.Gateway) *rbacv1ac.PolicyRuleApplyConfiguration {
	return rbacv1ac.PolicyRule().
		WithAPIGroups("coordination.k8s.io").
		WithResources("leases").
		WithResourceNames(ActiveLeaseNameFor(gw.Kind, gw.Name)).
		WithVerbs("get", "list", "watch", "update", "patch")
}

// standbyProbeRule admits the gateway's own pods to each other's metrics port: the standby
// probes the active's agent there (/availability).
func standbyProbeRule(gw *model.Gateway, metricsPort int32) *networkingv1ac.NetworkPolicyIngressRuleApplyConfiguration {
	return networkingv1ac.NetworkPolicyIngressRule().
		WithPorts(networkingv1ac.NetworkPolicyPort().WithProtocol(corev1.ProtocolTCP).WithPort(intstr.FromInt32(metricsPort))).
		WithFrom(networkingv1ac.NetworkPolicyPeer().WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(selectorOf(gw))))
}
