package main

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gatewaypod"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/golden"
)

// acmeCharon is charon's log in acme-gw's pod: hq's tunnel up, mismatch's device proposing
// what the gateway does not allow (it answers NO_PROPOSAL_CHOSEN to the gateway's own
// initiations too), and lines that must never be shown.
func acmeCharon() []byte {
	return gatewaypod.Log(testNow.Add(-3*time.Minute), append([]string{
		`00[DMN] Starting IKE charon daemon (strongSwan 5.9.8, Linux 6.1.0, x86_64)`,
		`10[IKE] <hq|1> initiating IKE_SA hq[1] to 198.51.100.6`,
		`11[NET] <hq|1> received packet: from 198.51.100.6[500] to 192.0.2.1[500] (248 bytes)`,
		`12[IKE] <hq|1> IKE_SA hq[1] established between 192.0.2.1[192.0.2.1]...198.51.100.6[hq.acme.example]`,
		`10[IKE] <mismatch|2> initiating IKE_SA mismatch[2] to 198.51.100.26`,
		`11[NET] <mismatch|2> received packet: from 198.51.100.26[500] to 192.0.2.1[500] (36 bytes)`,
		`11[IKE] <mismatch|2> received NO_PROPOSAL_CHOSEN notify error`,
		`09[NET] <3> received packet: from 198.51.100.26[500] to 192.0.2.1[500] (240 bytes)`,
		`09[IKE] <3> 198.51.100.26 is initiating an IKE_SA`,
		`09[CFG] <3> received proposals: IKE:AES_CBC_128/HMAC_SHA1_96/PRF_HMAC_SHA1/MODP_1024`,
		`09[CFG] <3> configured proposals: IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/ECP_256, IKE:AES_CBC_256/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/MODP_2048`,
		`09[IKE] <3> received proposals unacceptable`,
		`09[ENC] <3> generating IKE_SA_INIT response 0 [ N(NO_PROP) ]`,
		`11[CFG] <hq|1> psk = ` + labPSK,
	}, gatewaypod.CharonSecretLines()...)...)
}

func acmeAgentLog() []byte {
	return gatewaypod.Log(testNow.Add(-20*time.Minute), append([]string{
		`{"level":"info","ts":"2025-01-01T11:40:00Z","logger":"agent","msg":"configuration applied","generation":1,"took":"12ms"}`,
		`{"level":"error","ts":"2025-01-01T11:40:01Z","logger":"agent","msg":"gateway configuration refused; keeping the last applied one","error":"ConfigMap carries ruleset.nft besides model.json"}`,
		`{"level":"info","ts":"2025-01-01T11:40:02Z","logger":"agent","msg":"tunnel negotiation failed","connection":"mismatch","state":"NoProposalChosen","message":"received NO_PROPOSAL_CHOSEN notify error"}`,
		`{"level":"info","ts":"2025-01-01T11:40:03Z","logger":"agent","msg":"loaded connection","connection":"hq","peer":"hq","psk":"` + labPSK + `"}`,
	}, gatewaypod.AgentSecretLines()...)...)
}

func TestDiagnoseWithAgent(t *testing.T) {
	if env == nil {
		t.Skip("no API server")
	}
	const ns = "diagnose"
	createLab(t, ns)
	access := &fakeAccess{
		metrics: map[string]func(int) string{"acme-gw-gateway-7c9d5": acmeMetrics(ns)},
		logs: map[string][]byte{
			"acme-gw-gateway-7c9d5/agent":  acmeAgentLog(),
			"acme-gw-gateway-7c9d5/charon": acmeCharon(),
		},
	}
	reqs := &requestLog{}
	out, stderr, err := runWith(t, access, reqs, "-n", ns, "diagnose", "acme-gw", "--interval", "10ms")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	golden.Assert(t, "diagnose", []byte(out))
	for _, want := range []string{
		"VPNPeer mismatch\n  verdict: ERROR NoProposalChosen: IKE: the client proposes aes128-sha1-modp1024; the gateway allows aes256gcm16-prfsha256-ecp256, aes256-sha256-modp2048",
		"VPNPeer hq\n  verdict: WARNING DeniedTraffic: the peer sends traffic it is not granted: 5 packets dropped by authorization in 10ms",
		"  also:    OK Established: tunnel established 125m ago",
		"VPNPeer branch\n  verdict: ERROR CredentialsNotReady",
		"WARNING ConfigRejected: the agent refused 2 configurations",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the output", want)
		}
	}
	if strings.Contains(out, gatewaypod.SecretValue) || strings.Contains(out, labPSK) {
		t.Errorf("a secret is in the output")
	}
	assertNoSecrets(t, reqs, out)

	// the WireGuard gateway has no pod: said, and the verdicts stand on the rest
	wg, stderr, err := runWith(t, access, reqs, "-n", ns, "diagnose", "acme-wg")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	golden.Assert(t, "diagnose-nopod", []byte(wg))
}

// Through the real API server, which has no kubelet: the pod's metrics and logs cannot be
// read, and diagnose says so and judges from the conditions and events.
func TestDiagnoseWithoutAgent(t *testing.T) {
	if env == nil {
		t.Skip("no API server")
	}
	const ns = "diagnose-noagent"
	createLab(t, ns)
	reqs := &requestLog{}
	out, stderr, err := runWith(t, nil, reqs, "-n", ns, "diagnose", "acme-gw")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	golden.Assert(t, "diagnose-noagent", []byte(out))
	assertNoSecrets(t, reqs, out)
	if _, _, err := runWith(t, nil, reqs, "-n", ns, "diagnose", "nope"); err == nil || !strings.Contains(err.Error(), "VPNGateway diagnose-noagent/nope not found") {
		t.Errorf("error %v", err)
	}

	// a gateway the operator has not seen: no status, no peers, no pod
	gw := &vpnv1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Name: "fresh", Namespace: ns},
		Spec: vpnv1.VPNGatewaySpec{Protocol: vpnv1.ProtocolIPsec, Endpoint: vpnv1.Endpoint{LoadBalancer: &vpnv1.LoadBalancerEndpoint{}}}}
	if err := env.Client.Create(context.Background(), gw); err != nil {
		t.Fatal(err)
	}
	fresh, _, err := runWith(t, nil, reqs, "-n", ns, "diagnose", "fresh")
	if err != nil {
		t.Fatal(err)
	}
	golden.Assert(t, "diagnose-fresh", []byte(fresh))
	st, _, err := runWith(t, nil, reqs, "-n", ns, "status", "fresh")
	if err != nil {
		t.Fatal(err)
	}
	golden.Assert(t, "status-fresh", []byte(st))
}
