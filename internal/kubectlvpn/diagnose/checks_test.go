package diagnose

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/gateways"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gatewaypod"
)

var verdictNow = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func cond(t, status, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: t, Status: metav1.ConditionStatus(status), Reason: reason, Message: msg}
}

func testGateway(proto vpnv1.Protocol, conds ...metav1.Condition) *vpnv1.VPNGateway {
	gw := &vpnv1.VPNGateway{
		ObjectMeta: metav1.ObjectMeta{Name: "acme-gw", Namespace: "acme", Generation: 1},
		Spec: vpnv1.VPNGatewaySpec{
			Protocol: proto,
			Endpoint: vpnv1.Endpoint{HostNetwork: &vpnv1.HostNetworkEndpoint{NodeName: "node-1"}},
			Exposures: []vpnv1.Exposure{
				{Name: "web", Target: vpnv1.ExposureTarget{Service: &vpnv1.ServiceRef{Name: "web"}, Ports: []intstr.IntOrString{intstr.FromInt32(8080)}}},
				{Name: "admin", Target: vpnv1.ExposureTarget{Address: "10.0.0.7", Ports: []intstr.IntOrString{intstr.FromInt32(8081)}}},
			},
		},
		Status: vpnv1.VPNGatewayStatus{ObservedGeneration: 1, PublicAddress: "192.0.2.1", ServiceCIDR: "100.64.12.0/24", Conditions: conds},
	}
	if proto == vpnv1.ProtocolWireGuard {
		gw.Status.WireGuardPublicKey = "GWaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaE="
	}
	return gw
}

func testPeer(proto vpnv1.Protocol, conds ...metav1.Condition) *vpnv1.VPNPeer {
	p := &vpnv1.VPNPeer{
		ObjectMeta: metav1.ObjectMeta{Name: "hq", Namespace: "acme"},
		Spec:       vpnv1.VPNPeerSpec{GatewayRef: "acme-gw", Authorization: &vpnv1.Authorization{Exposures: []string{"web"}}},
		Status:     vpnv1.VPNPeerStatus{Conditions: conds},
	}
	if proto == vpnv1.ProtocolIPsec {
		p.Spec.IPsec = &vpnv1.IPsecPeer{Peer: vpnv1.IPsecRemote{Address: "198.51.100.10", ID: "hq.acme.example"},
			RemoteSubnets: []string{"192.168.10.0/24"}, PSKSecretRef: vpnv1.SecretKeyRef{Name: "hq-psk", Key: "psk"}}
	} else {
		p.Spec.WireGuard = &vpnv1.WireGuardPeer{PublicKey: "PEERbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbE=", Subnets: []string{"192.168.50.0/24"}}
	}
	return p
}

var (
	authorized    = cond("Authorized", "True", "Authorized", `granted exposures: "web"; reverse exposures: none`)
	credsOK       = cond("CredentialsReady", "True", "SecretsPresent", "referenced Secrets exist")
	established   = cond("Connected", "True", "Established", "tunnel Established")
	down          = cond("Connected", "False", "Down", "not connected")
	noAnswer      = cond("Connected", "False", "Down", "no answer from 198.51.100.10, retrying")
	peerRejects   = cond("Connected", "False", "NoProposalChosen", "the peer accepts none of our proposals (charon: received NO_PROPOSAL_CHOSEN notify error)")
	authFailed    = cond("Connected", "False", "AuthFailed", "the peer's pre-shared key does not match (charon: tried 1 shared key for '192.0.2.1' - 'hq.acme.example', but MAC mismatched)")
	ikeProposals  = []string{"aes256gcm16-prfsha256-ecp256", "aes256-sha256-modp2048"}
	espProposals  = []string{"aes256gcm16-ecp256", "aes256-sha256-modp2048"}
	reachesWeb    = []string{"web (100.64.12.10 8080)"}
	charonAtStart = []string{`00[DMN] Starting IKE charon daemon (strongSwan 5.9.8, Linux 6.1.0, x86_64)`}
)

func charonLog(lines ...string) []logLine {
	return splitLog(gatewaypod.Log(verdictNow.Add(-time.Minute), lines...))
}

func TestPeerVerdicts(t *testing.T) {
	ipsec, wg := vpnv1.ProtocolIPsec, vpnv1.ProtocolWireGuard
	for _, tc := range []struct {
		name string
		e    peerEvidence
		// causes: the verdict's cause first, then the further findings'
		causes   []string
		contains []string
		excludes []string
	}{
		{
			name: "established",
			e: peerEvidence{Peer: func() *vpnv1.VPNPeer {
				p := testPeer(ipsec, authorized, credsOK, established)
				at := metav1.NewTime(verdictNow.Add(-2 * time.Hour))
				p.Status.Tunnel = &vpnv1.TunnelStatus{EstablishedAt: &at, BytesIn: 2048, BytesOut: 10}
				return p
			}(), Reaches: reachesWeb, Charon: charonLog(charonAtStart...)},
			causes:   []string{"Established"},
			contains: []string{"tunnel established 120m ago (2KiB in, 10B out); reaches web (100.64.12.10 8080)"},
		},
		{
			name:     "no grants",
			e:        peerEvidence{Peer: testPeer(ipsec, cond("Authorized", "False", "NoGrants", model.MessageNoBlockMultiPeer), credsOK, established)},
			causes:   []string{"NotAuthorized", "Established"},
			contains: []string{"not authorized (NoGrants): multi-peer gateway", "reaches nothing", "spec.authorization.exposures of VPNPeer hq (VPNGateway acme-gw offers: web, admin)"},
		},
		{
			name:     "duplicate identity: no tunnel to judge",
			e:        peerEvidence{Peer: testPeer(ipsec, cond("Authorized", "False", "DuplicateIdentity", `IKE identity "hq.acme.example" is already that of older peer "old"`), credsOK, down), Charon: charonLog()},
			causes:   []string{"NotAuthorized"},
			contains: []string{"an identity of its own"},
			excludes: []string{"reaches nothing"},
		},
		{
			name:     "not reported yet: the model's decision",
			e:        peerEvidence{Peer: testPeer(ipsec), Decision: model.Decision{Reason: model.ReasonUnknownGrant, Message: `authorization names what gateway "acme-gw" does not have: exposure "db"`}},
			causes:   []string{"NotAuthorized", "NotReported"},
			contains: []string{"(UnknownGrant)", `exposure "db"`, "name only exposures VPNGateway acme-gw has (web, admin)"},
		},
		{
			name:     "secret missing",
			e:        peerEvidence{Peer: testPeer(ipsec, authorized, cond("CredentialsReady", "False", "SecretNotFound", `Secret "hq-psk" does not exist`), cond("Connected", "False", "MissingSecret", "no key"))},
			causes:   []string{"CredentialsNotReady"},
			contains: []string{`Secret "hq-psk" does not exist`, "kubectl -n acme create secret generic hq-psk --from-literal=psk=<the key>"},
		},
		{
			name: "the client proposes something else (IKE, responder)",
			e: peerEvidence{Peer: testPeer(ipsec, authorized, credsOK, down), Charon: charonLog(
				`09[NET] <7> received packet: from 198.51.100.10[500] to 192.0.2.1[500] (240 bytes)`,
				`09[IKE] <7> 198.51.100.10 is initiating an IKE_SA`,
				`09[CFG] <7> received proposals: IKE:AES_CBC_128/HMAC_SHA1_96/PRF_HMAC_SHA1/MODP_1024`,
				`09[CFG] <7> configured proposals: IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/ECP_256, IKE:AES_CBC_256/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/MODP_2048`,
				`09[IKE] <7> received proposals unacceptable`,
			)},
			causes: []string{"NoProposalChosen"},
			contains: []string{
				"IKE: the client proposes aes128-sha1-modp1024; the gateway allows aes256gcm16-prfsha256-ecp256, aes256-sha256-modp2048 (no encryption algorithm in common (the client offers aes128)",
				"kubectl vpn peer-config hq -n acme --format <vendor>",
				"the client's sha1, prfsha1, modp1024 are weak: do not add them to the gateway",
			},
		},
		{
			name: "the client proposes other ESP (CHILD_SA in IKE_AUTH)",
			e: peerEvidence{Peer: testPeer(ipsec, authorized, credsOK, cond("Connected", "False", "NoProposalChosen", "none of the peer's proposals is acceptable")), Charon: charonLog(
				`09[CFG] <hq|3> received proposals: ESP:AES_CBC_256/HMAC_SHA2_512_256/NO_EXT_SEQ`,
				`09[CFG] <hq|3> configured proposals: ESP:AES_GCM_16_256/NO_EXT_SEQ, ESP:AES_CBC_256/HMAC_SHA2_256_128/NO_EXT_SEQ`,
				`09[IKE] <hq|3> no acceptable proposal found`,
			)},
			causes:   []string{"NoProposalChosen"},
			contains: []string{"ESP: the client proposes aes256-sha512; the gateway allows aes256gcm16-ecp256, aes256-sha256-modp2048 (no integrity algorithm in common (the client offers sha512))", "add it to spec.ipsec.esp.proposals of VPNPeer hq"},
		},
		{
			name: "the client accepts none of ours (initiator)",
			e: peerEvidence{Peer: testPeer(ipsec, authorized, credsOK, peerRejects), Charon: charonLog(
				`10[IKE] <hq|8> initiating IKE_SA hq[8] to 198.51.100.10`,
				`11[NET] <hq|8> received packet: from 198.51.100.10[500] to 192.0.2.1[500] (36 bytes)`,
				`11[IKE] <hq|8> received NO_PROPOSAL_CHOSEN notify error`,
			)},
			causes:   []string{"NoProposalChosen"},
			contains: []string{"the client accepts none of the gateway's proposals: the gateway proposes IKE aes256gcm16-prfsha256-ecp256, aes256-sha256-modp2048, ESP aes256gcm16-ecp256"},
		},
		{
			name: "traffic selectors",
			e: peerEvidence{Peer: testPeer(ipsec, authorized, credsOK, cond("Connected", "False", "NoProposalChosen", "the peer does not accept our traffic selectors (charon: received TS_UNACCEPTABLE notify, no CHILD_SA built)")), Charon: charonLog(
				`11[IKE] <hq|8> received TS_UNACCEPTABLE notify, no CHILD_SA built`,
			)},
			causes:   []string{"TrafficSelectorsUnacceptable"},
			contains: []string{"local networks as exactly 192.168.10.0/24 and its remote network as 100.64.12.0/24"},
		},
		{
			name: "different keys",
			e: peerEvidence{Peer: testPeer(ipsec, authorized, credsOK, authFailed), Charon: charonLog(
				`09[IKE] <9> looking for peer configs matching 192.0.2.1[192.0.2.1]...198.51.100.10[hq.acme.example]`,
				`09[IKE] <hq|9> tried 1 shared key for '192.0.2.1' - 'hq.acme.example', but MAC mismatched`,
			)},
			causes: []string{"AuthenticationFailed"},
			contains: []string{`the pre-shared keys differ: the gateway ("192.0.2.1") checked the client's ("hq.acme.example") authentication with the key of Secret hq-psk (key psk)`,
				`on the client: local identity "hq.acme.example", remote identity "192.0.2.1"`, "--include-secrets"},
		},
		{
			name: "the client claims another identity",
			e: peerEvidence{Peer: testPeer(ipsec, authorized, credsOK, down), Charon: charonLog(
				`09[NET] <4> received packet: from 198.51.100.10[4500] to 192.0.2.1[4500] (300 bytes)`,
				`09[IKE] <4> looking for peer configs matching 192.0.2.1[vpn.example]...198.51.100.10[fw.hq.example]`,
				`09[CFG] <4> no matching peer config found`,
			)},
			causes:   []string{"AuthenticationFailed"},
			contains: []string{`the client presents itself as "fw.hq.example" and expects the gateway as "vpn.example"; this peer is "hq.acme.example" and the gateway "192.0.2.1"`},
		},
		{
			name: "no shared key for the client's identity",
			e: peerEvidence{Peer: testPeer(ipsec, authorized, credsOK, down), Charon: charonLog(
				`09[IKE] <hq|4> no shared key found for '192.0.2.1' - 'branch.acme.example'`,
			)},
			causes:   []string{"AuthenticationFailed"},
			contains: []string{`the client presents itself as "branch.acme.example"; the gateway expects "hq.acme.example"`},
		},
		{
			name:     "the client refuses our authentication",
			e:        peerEvidence{Peer: testPeer(ipsec, authorized, credsOK, cond("Connected", "False", "AuthFailed", "the peer rejected our authentication")), Charon: charonLog(`11[IKE] <hq|8> received AUTHENTICATION_FAILED notify error`)},
			causes:   []string{"AuthenticationFailed"},
			contains: []string{"the client rejected the gateway's authentication: its key for the gateway differs from Secret hq-psk (key psk), or it expects the gateway as another identity than \"192.0.2.1\""},
		},
		{
			name: "no IKE packets at all",
			e: peerEvidence{Peer: testPeer(ipsec, authorized, credsOK, noAnswer), CharonLines: 200, Charon: charonLog(
				`10[IKE] <hq|2> initiating IKE_SA hq[2] to 198.51.100.10`,
				`10[NET] <hq|2> sending packet: from 192.0.2.1[500] to 198.51.100.10[500] (464 bytes)`,
				`11[IKE] <hq|2> retransmit 1 of request with message ID 0`,
				`12[NET] <3> received packet: from 198.51.100.99[500] to 192.0.2.1[500] (240 bytes)`,
			)},
			causes: []string{"NoIKEPackets"},
			contains: []string{"no IKE packet from 198.51.100.10 in the last 200 lines of charon's log; the gateway's own initiations get no answer",
				"reaches 192.0.2.1 on UDP 500 and 4500", "its outside address is 198.51.100.10 (spec.ipsec.peer.address)"},
		},
		{
			name:     "down, charon's log not read",
			e:        peerEvidence{Peer: testPeer(ipsec, authorized, credsOK, down)},
			causes:   []string{"Down"},
			contains: []string{"charon's log could not be read", "kubectl -n acme logs -l vpn.bnerd.net/gateway=acme-gw -c charon"},
		},
		{
			name: "packets arrive, nothing known fails",
			e: peerEvidence{Peer: testPeer(ipsec, authorized, credsOK, down), Charon: charonLog(
				`09[NET] <5> received packet: from 198.51.100.10[500] to 192.0.2.1[500] (240 bytes)`,
			)},
			causes:   []string{"NotEstablished"},
			contains: []string{"IKE packets from 198.51.100.10 arrive but no tunnel is up (Down: not connected)"},
		},
		{
			name:     "connecting",
			e:        peerEvidence{Peer: testPeer(ipsec, authorized, credsOK, cond("Connected", "False", "Connecting", "negotiating")), Charon: charonLog()},
			causes:   []string{"Connecting"},
			contains: []string{"being negotiated"},
		},
		{
			name: "drops rising",
			e: peerEvidence{Peer: testPeer(ipsec, authorized, credsOK, established), Reaches: reachesWeb,
				Metrics: &gateways.PeerMetrics{Up: true, DropsIn: 15, DropsOut: 0}, Earlier: &gateways.PeerMetrics{Up: true, DropsIn: 11}, Interval: 3 * time.Second},
			causes:   []string{"DeniedTraffic", "Established"},
			contains: []string{"the peer sends traffic it is not granted: 4 packets dropped by authorization in 3s (15 in, 0 out since the agent started); it may reach only web (100.64.12.10 8080)", "grant more in spec.authorization.exposures of VPNPeer hq"},
		},
		{
			name: "drops, not rising",
			e: peerEvidence{Peer: testPeer(ipsec, authorized, credsOK, established), Reaches: reachesWeb,
				Metrics: &gateways.PeerMetrics{Up: true, DropsIn: 15}, Earlier: &gateways.PeerMetrics{Up: true, DropsIn: 15}, Interval: 3 * time.Second},
			causes:   []string{"Established", "DeniedTraffic"},
			contains: []string{"15 packets dropped by authorization since the agent started (15 in, 0 out, none in the last 3s)"},
		},
		{
			name: "dark peer's drops",
			e: peerEvidence{Peer: testPeer(ipsec, cond("Authorized", "False", "NoGrants", model.MessageEmptyBlock), credsOK, established),
				Metrics: &gateways.PeerMetrics{Up: true, DropsIn: 9}, Earlier: &gateways.PeerMetrics{Up: true, DropsIn: 2}, Interval: time.Second},
			causes:   []string{"NotAuthorized", "DeniedTraffic", "Established"},
			contains: []string{"it may reach nothing"},
		},
		{
			name:     "wireguard without handshake",
			e:        peerEvidence{Peer: testPeer(wg, authorized, credsOK, cond("Connected", "False", "Down", "no handshake"))},
			causes:   []string{"NoHandshake"},
			contains: []string{"last handshake never", "reaches 192.0.2.1 on UDP 51820", "PublicKey is the gateway's GWaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaE=", "public key PEERbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbE=", "AllowedIPs include 100.64.12.0/24"},
		},
		{
			name:   "not reported",
			e:      peerEvidence{Peer: testPeer(ipsec, authorized, credsOK), Charon: charonLog(`09[NET] <5> received packet: from 198.51.100.10[500] to 192.0.2.1[500] (240 bytes)`)},
			causes: []string{"NotReported"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.e
			if e.Gateway == nil {
				proto := vpnv1.ProtocolIPsec
				if e.Peer.Spec.WireGuard != nil {
					proto = vpnv1.ProtocolWireGuard
				}
				e.Gateway = testGateway(proto)
			}
			e.Offered = []string{"web", "admin"}
			if e.Peer.Spec.IPsec != nil {
				e.IKEProposals, e.ESPProposals = ikeProposals, espProposals
			}
			e.Now = verdictNow
			fs := peerFindings(e)
			var causes []string
			var text strings.Builder
			for _, f := range fs {
				causes = append(causes, f.Cause)
				text.WriteString(f.Severity + " " + f.Cause + ": " + f.Summary + "\n  next: " + f.Next + "\n")
			}
			if strings.Join(causes, " ") != strings.Join(tc.causes, " ") {
				t.Errorf("causes %v, want %v\n%s", causes, tc.causes, text.String())
			}
			for _, s := range tc.contains {
				if !strings.Contains(text.String(), s) {
					t.Errorf("no %q in\n%s", s, text.String())
				}
			}
			for _, s := range tc.excludes {
				if strings.Contains(text.String(), s) {
					t.Errorf("%q in\n%s", s, text.String())
				}
			}
		})
	}
}

func TestGatewayVerdicts(t *testing.T) {
	ready := []metav1.Condition{cond("Ready", "True", "Ready", "gateway is serving"), cond("AddressesAllocated", "True", "Allocated", "")}
	running := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "acme-gw-gateway-1", Namespace: "acme"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	n := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name     string
		e        gatewayEvidence
		causes   []string
		contains []string
	}{
		{name: "ready", e: gatewayEvidence{Gateway: testGateway(vpnv1.ProtocolIPsec, ready...), Pod: running, Metrics: &gateways.AgentMetrics{RulesetRepairs: n(0), ConfigRejected: n(0)}},
			causes: []string{"Ready"}},
		{name: "pod unavailable",
			e: gatewayEvidence{Gateway: testGateway(vpnv1.ProtocolIPsec,
				cond("Ready", "False", "Unavailable", "GatewayAvailable: gateway pod is not available (0/1 ready)"),
				cond("AddressesAllocated", "True", "Allocated", ""), cond("GatewayAvailable", "False", "Unavailable", "gateway pod is not available (0/1 ready)")),
				NoPod: "no pod with label vpn.bnerd.net/gateway=acme-gw"},
			causes:   []string{"NotReady"},
			contains: []string{"not Ready: GatewayAvailable Unavailable: gateway pod is not available (0/1 ready)", "kubectl -n acme describe pod -l vpn.bnerd.net/gateway=acme-gw"}},
		{name: "first failing condition in the operator's order",
			e: gatewayEvidence{Gateway: testGateway(vpnv1.ProtocolIPsec,
				cond("Ready", "False", "NotPermitted", "EndpointReady: host network is not allowed"),
				cond("GatewayAvailable", "False", "NotCreated", "no Deployment"), cond("EndpointReady", "False", "NotPermitted", "host network is not allowed"),
				cond("AddressesAllocated", "True", "Allocated", "")), NoPod: "no pod"},
			causes:   []string{"NotReady", "NoPod"},
			contains: []string{"not Ready: EndpointReady NotPermitted", "labels it vpn.bnerd.net/host-network=allowed"}},
		{name: "not reported", e: gatewayEvidence{Gateway: testGateway(vpnv1.ProtocolIPsec), NoPod: "no pod"},
			causes: []string{"NotReported", "NoPod"}, contains: []string{"is the operator running?"}},
		{name: "status behind", e: gatewayEvidence{Gateway: func() *vpnv1.VPNGateway {
			gw := testGateway(vpnv1.ProtocolIPsec, ready...)
			gw.Generation = 3
			return gw
		}(), Pod: running},
			causes: []string{"StatusBehind", "Ready"}, contains: []string{"generation 1; the spec is at 3"}},
		{name: "repairs and rejections",
			e: gatewayEvidence{Gateway: testGateway(vpnv1.ProtocolIPsec, ready...), Pod: running, Now: verdictNow,
				Metrics: &gateways.AgentMetrics{RulesetRepairs: n(2), ConfigRejected: n(1)},
				Events: []eventFact{
					{Time: verdictNow.Add(-time.Hour), Type: "Warning", Reason: "RulesetRepaired", Message: "table deleted; re-applied", Kind: "VPNGateway", Name: "acme-gw"},
					{Time: verdictNow.Add(-5 * time.Minute), Type: "Warning", Reason: "ConfigRejected", Message: "ConfigMap carries ruleset.nft besides model.json", Kind: "VPNGateway", Name: "acme-gw"},
				}},
			causes: []string{"RulesetRepaired", "ConfigRejected", "Ready"},
			contains: []string{"re-applied it 2 times since it started (last, 60m ago: table deleted; re-applied)", "something on node node-1 rewrites nftables",
				"refused 1 configurations since it started; the last good one stays applied (last, 5m ago: ConfigMap carries ruleset.nft besides model.json)",
				"ConfigMap acme-gw-gateway-config must carry model.json alone"}},
		{name: "spoofed sources",
			e: gatewayEvidence{Gateway: testGateway(vpnv1.ProtocolIPsec, ready...), Pod: running, Now: verdictNow,
				Metrics: &gateways.AgentMetrics{RulesetRepairs: n(0), ConfigRejected: n(0), SpoofedDrops: n(5)}},
			causes:   []string{"SpoofedTraffic", "Ready"},
			contains: []string{"5 packets came through a peer's SA from a source outside that peer's subnets", "spec.ipsec.remoteSubnets"}},
		{name: "spoof check without drops",
			e:      gatewayEvidence{Gateway: testGateway(vpnv1.ProtocolIPsec, ready...), Pod: running, Metrics: &gateways.AgentMetrics{RulesetRepairs: n(0), ConfigRejected: n(0), SpoofedDrops: n(0)}},
			causes: []string{"Ready"}},
		{name: "nothing readable from the pod",
			e:      gatewayEvidence{Gateway: testGateway(vpnv1.ProtocolIPsec, ready...), Pod: running, MetricsErr: "not reachable: 503", LogErr: "forbidden"},
			causes: []string{"Ready", "MetricsUnreadable", "LogsUnreadable"}, contains: []string{"pods/proxy", "pods/log"}},
		{name: "crash looping",
			e: gatewayEvidence{Gateway: testGateway(vpnv1.ProtocolIPsec, ready...), Pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "acme-gw-gateway-1"},
				Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
					{Name: "agent", RestartCount: 4, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}}},
				Metrics: &gateways.AgentMetrics{}},
			causes: []string{"PodNotReady", "Ready"}, contains: []string{"gateway pod acme-gw-gateway-1: Running: agent CrashLoopBackOff (4 restarts)"}},
		{name: "agent errors",
			e: gatewayEvidence{Gateway: testGateway(vpnv1.ProtocolIPsec, ready...), Pod: running, Now: verdictNow, AgentTail: 200,
				Metrics: &gateways.AgentMetrics{}, Agent: splitLog(gatewaypod.Log(verdictNow.Add(-2*time.Minute), gatewaypod.AgentSecretLines()...))},
			causes: []string{"Ready", "AgentErrors"}, contains: []string{"the agent logged 3 errors in its last 200 lines (last, 117s ago: error initiate failed connection=hq)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := gatewayFindings(tc.e)
			var causes []string
			var text strings.Builder
			for _, f := range fs {
				causes = append(causes, f.Cause)
				text.WriteString(f.Severity + " " + f.Cause + ": " + f.Summary + "\n  next: " + f.Next + "\n")
			}
			if strings.Join(causes, " ") != strings.Join(tc.causes, " ") {
				t.Errorf("causes %v, want %v\n%s", causes, tc.causes, text.String())
			}
			for _, s := range tc.contains {
				if !strings.Contains(text.String(), s) {
					t.Errorf("no %q in\n%s", s, text.String())
				}
			}
			if strings.Contains(text.String(), gatewaypod.SecretValue) {
				t.Errorf("the secret in\n%s", text.String())
			}
		})
	}
}
