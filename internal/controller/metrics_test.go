package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// gatewayReadySeries reads bnerd_vpn_gateway_ready for one gateway: reason -> value.
func gatewayReadySeries(t *testing.T, ns, name string) map[string]float64 {
	return gatewaySeries(t, "bnerd_vpn_gateway_ready", "reason", ns, name)
}

// gatewaySeries reads a gauge of the operator's for one gateway: the value of label key (""
// for a gauge without one) -> value.
func gatewaySeries(t *testing.T, metric, key, ns, name string) map[string]float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["namespace"] == ns && l["gateway"] == name {
				out[l[key]] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// The operator exports each gateway's Ready condition for alerting, one series per gateway
// (its reason a label), and drops it when the gateway is deleted.
func TestGatewayReadyMetric(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ns := namespace(t)
	gw := ipsecGateway(ns, "metered")
	gw.Spec.Endpoint.HostNetwork.NodeName = "node-" + ns // no such node: Ready=False, NotFound
	create(t, gw)
	c := waitCondition(t, gw, vpnv1.ConditionReady, "False", "NotFound")
	eventually(t, 20*time.Second, func() error {
		got := gatewayReadySeries(t, ns, "metered")
		if len(got) != 1 || got[c.Reason] != 0 {
			return fmt.Errorf("series %v, want exactly {%s: 0}", got, c.Reason)
		}
		if _, ok := got[c.Reason]; !ok {
			return fmt.Errorf("series %v, want reason %s", got, c.Reason)
		}
		return nil
	})
	if err := env.Client.Delete(context.Background(), gw); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		if got := gatewayReadySeries(t, ns, "metered"); len(got) != 0 {
			return fmt.Errorf("deleted gateway still has series %v", got)
		}
		return nil
	})
}
