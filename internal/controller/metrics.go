package controller

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// gatewayReady is the operator's view of each gateway for alerting (config/prometheus): the
// gateway agents export the peers' tunnels, the operator whether the gateway itself is Ready.
var gatewayReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "bnerd_vpn_gateway_ready",
	Help: "1 when the VPNGateway's Ready condition is True, else 0; reason is the condition's reason.",
}, []string{"namespace", "gateway", "reason"})

// legacyGatewayReady is gatewayReady for legacy IPsecGateways (a series of their own: a
// VPNGateway and an IPsecGateway may share a name). A released (migrated) gateway has none.
var legacyGatewayReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "bnerd_vpn_ipsecgateway_ready",
	Help: "1 when the legacy IPsecGateway's Ready condition is True, else 0; reason is the condition's reason.",
}, []string{"namespace", "gateway", "reason"})

// gatewayStandbys is, for each gateway with a standby, how many of its pods are ready to take
// over (status.availability.standbyPods): 0 for a gateway that asked for a standby and has none
// is what BnerdVPNGatewayStandbyMissing alerts on. A gateway without a standby has no series.
var gatewayStandbys = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "bnerd_vpn_gateway_standbys_ready",
	Help: "Pods of a VPNGateway with a standby that are ready to take over from its active pod; no series for a gateway without a standby.",
}, []string{"namespace", "gateway"})

// childrenRestored counts the children found changed outside the operator and restored.
var childrenRestored = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "bnerd_vpn_children_restored_total",
	Help: "Children of a gateway (Deployment, ConfigMap, Role, ...) found changed by someone other than the operator and restored to their rendering, by kind.",
}, []string{"namespace", "gateway", "kind"})

// rollouts is where the fleet's move to new gateway images stands (rolloutGate).
var rollouts = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "bnerd_vpn_gateway_rollouts",
	Help: "Gateways by rollout state: rolling (their Deployment is replacing its pods; at most --gateway-rollout-concurrency of them move to new gateway images at a time) or waiting (keeping the images their pods run until a place is free).",
}, []string{"state"})

// The states of rollouts.
const (
	rolloutStateRolling = "rolling"
	rolloutStateWaiting = "waiting"
)

// RegisterMetrics adds the operator's own metrics to reg (controller-runtime's registry, served
// on --metrics-bind-address). Registering them again is harmless.
func RegisterMetrics(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{gatewayReady, gatewayStandbys, legacyGatewayReady, childrenRestored, rollouts} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return err
			}
		}
	}
	for _, state := range []string{rolloutStateRolling, rolloutStateWaiting} {
		rollouts.WithLabelValues(state)
	}
	return nil
}

// observeLegacyGateway records a legacy gateway's Ready condition as computed for this pass.
func observeLegacyGateway(namespace, name string, conds []metav1.Condition) {
	ready, reason := 0.0, "Unknown"
	if c := findCondition(conds, vpnv1.ConditionReady); c != nil {
		reason = c.Reason
		if c.Status == metav1.ConditionTrue {
			ready = 1
		}
	}
	forgetLegacyGateway(namespace, name)
	legacyGatewayReady.WithLabelValues(namespace, name, reason).Set(ready)
}

// forgetLegacyGateway drops a deleted or released legacy gateway's series.
func forgetLegacyGateway(namespace, name string) {
	legacyGatewayReady.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "gateway": name})
}

// observeGateway records the gateway's Ready condition as computed for this pass.
func observeGateway(gw *vpnv1.VPNGateway, st *vpnv1.VPNGatewayStatus) {
	ready, reason := 0.0, "Unknown"
	if c := findCondition(st.Conditions, vpnv1.ConditionReady); c != nil {
		reason = c.Reason
		if c.Status == metav1.ConditionTrue {
			ready = 1
		}
	}
	forgetGateway(gw.Namespace, gw.Name)
	gatewayReady.WithLabelValues(gw.Namespace, gw.Name, reason).Set(ready)
	if a := st.Availability; a != nil {
		gatewayStandbys.WithLabelValues(gw.Namespace, gw.Name).Set(float64(len(a.StandbyPods)))
	}
}

// forgetGateway drops a deleted gateway's series.
func forgetGateway(namespace, name string) {
	gatewayReady.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "gateway": name})
	gatewayStandbys.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "gateway": name})
}
