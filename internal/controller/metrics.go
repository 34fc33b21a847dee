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

// childrenRestored counts the children found changed outside the operator and restored.
var childrenRestored = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "bnerd_vpn_children_restored_total",
	Help: "Children of a gateway (Deployment, ConfigMap, Role, ...) found changed by someone other than the operator and restored to their rendering, by kind.",
}, []string{"namespace", "gateway", "kind"})

// RegisterMetrics adds the operator's own metrics to reg (controller-runtime's registry, served
// on --metrics-bind-address). Registering them again is harmless.
func RegisterMetrics(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{gatewayReady, legacyGatewayReady, childrenRestored} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return err
			}
		}
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
}

// forgetGateway drops a deleted gateway's series.
func forgetGateway(namespace, name string) {
	gatewayReady.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "gateway": name})
}
