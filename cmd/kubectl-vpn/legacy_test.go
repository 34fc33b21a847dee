package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/status"
)

// kubectl vpn status lists the legacy IPsecGateways after the VPNGateways (conditions,
// tunnels with their state, migration), alone when GATEWAY names one; diagnose of an
// IPsecGateway shows the same and says how to move it.
func TestStatusListsIPsecGateways(t *testing.T) {
	if env == nil {
		t.Skip("no API server")
	}
	const ns = "status-legacy"
	namespace(t, ns)
	g := createLegacy(t, ns, "hq", "branch")
	g.Status.TunnelsUp = "1/2"
	g.Status.Tunnels[0].EstablishedAt = at(90 * time.Minute)
	g.Status.Tunnels[0].BytesIn, g.Status.Tunnels[0].BytesOut = 2048, 4096
	g.Status.Tunnels[1].State, g.Status.Tunnels[1].LastError = "Connecting", "NO_PROPOSAL_CHOSEN"
	meta.SetStatusCondition(&g.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "GatewayUnavailable", Message: "no gateway pod is ready"})
	meta.SetStatusCondition(&g.Status.Conditions, metav1.Condition{Type: "GatewayAvailable", Status: metav1.ConditionFalse, Reason: "PodNotReady", Message: "0 of 1 gateway pods ready"})
	if err := env.Client.Status().Update(context.Background(), g); err != nil {
		t.Fatal(err)
	}

	out, stderr, err := runWith(t, &fakeAccess{}, nil, "-n", ns, "status")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	t.Logf("status:\n%s", out)
	for _, want := range []string{
		"IPsecGateway status-legacy/acme (legacy ipsec.bnerd.net; kubectl vpn migrate ipsecgateway acme moves it)",
		"public address  198.51.100.7",
		"ready           False: GatewayAvailable PodNotReady: 0 of 1 gateway pods ready",
		"tunnels up      1/2",
		"hq      192.168.10.0/24",
		"Established",
		"branch  10.30.0.0/16,10.31.0.0/16",
		"NO_PROPOSAL_CHOSEN",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q", want)
		}
	}

	js, _, err := runWith(t, &fakeAccess{}, nil, "-n", ns, "status", "acme", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rep status.Report
	if err := json.Unmarshal([]byte(js), &rep); err != nil || len(rep.Gateways) != 0 || len(rep.IPsecGateways) != 1 {
		t.Fatalf("%v %s", err, js)
	}
	l := rep.IPsecGateways[0]
	if l.Name != "acme" || len(l.Tunnels) != 2 || l.Tunnels[0].State != "Established" || l.Tunnels[0].EstablishedForSeconds == nil ||
		l.Tunnels[1].LastError != "NO_PROPOSAL_CHOSEN" || l.Ready.Status != "False" || l.Cause == nil || l.Cause.Reason != "PodNotReady" {
		t.Errorf("report %+v", l)
	}

	d, _, err := runWith(t, &fakeAccess{}, nil, "-n", ns, "diagnose", "acme")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d, "IPsecGateway status-legacy/acme") || !strings.Contains(d, "acme is a legacy IPsecGateway") ||
		!strings.Contains(d, "kubectl vpn migrate ipsecgateway acme -n status-legacy --dry-run") {
		t.Errorf("diagnose:\n%s", d)
	}
	assertNoSecrets(t, &requestLog{}, out+js+d)
}
