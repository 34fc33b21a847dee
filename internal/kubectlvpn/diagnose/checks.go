package diagnose

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/deviceconfig"
	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/gateways"
	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/status"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// The verdicts are pure functions of what diagnose collected (conditions, events, the agent's
// metrics, log lines): one small check per rule, applied in order (table-tested in
// checks_test.go). A gateway's checks and a peer's each read their facts, what was collected
// and what follows from it, and say what they find.

// Severities.
const (
	sevError   = "error"
	sevWarning = "warning"
	sevInfo    = "info"
	sevOK      = "ok"
)

// severityRank orders findings for the verdict: an OK tunnel stays the headline over a note.
var severityRank = map[string]int{sevError: 0, sevWarning: 1, sevOK: 2, sevInfo: 3}

// finding is one conclusion: what is wrong (or right) and what to do next.
type finding struct {
	Severity string `json:"severity"`
	// Cause is a short name: NotAuthorized, NoProposalChosen, AuthenticationFailed, ...
	Cause   string `json:"cause"`
	Summary string `json:"summary"`
	Next    string `json:"next,omitempty"`
}

// sortFindings orders findings most severe first, keeping the checks' order among equals; the
// first is the verdict.
func sortFindings(f []finding) []finding {
	slices.SortStableFunc(f, func(a, b finding) int { return severityRank[a.Severity] - severityRank[b.Severity] })
	return f
}

// check is one rule: what it finds in the facts F (nothing: the rule does not apply).
type check[F any] func(*F) []finding

// applyAll is the findings of every check, in the checks' order.
func applyAll[F any](checks []check[F], f *F) []finding {
	var out []finding
	for _, c := range checks {
		out = append(out, c(f)...)
	}
	return out
}

// firstOf is the findings of the first check that finds anything.
func firstOf[F any](checks []check[F], f *F) []finding {
	for _, c := range checks {
		if out := c(f); len(out) > 0 {
			return out
		}
	}
	return nil
}

// --- peers ---

// noTunnelReasons are Authorized reasons that leave the peer without any tunnel: its
// connection state follows from them.
var noTunnelReasons = []string{
	model.ReasonProtocolMismatch, model.ReasonGatewayNotFound, model.ReasonDuplicateIdentity,
	model.ReasonInvalidIdentity, model.ReasonCredentialsRefused,
}

// peerFacts are the evidence on a peer and what the peer's checks read from it.
type peerFacts struct {
	*peerEvidence
	// authorized, reason and message: the operator's Authorized condition, else the model's
	// decision.
	authorized      bool
	reason, message string
	// credentials is the CredentialsReady condition when it is not True.
	credentials *metav1.Condition
	// conn is the Connected condition (nil: not reported); connReason and connMsg its reason
	// and message.
	conn                *metav1.Condition
	connReason, connMsg string
	// configure is the command that writes the client's configuration.
	configure string
	charon    charonFacts
}

// charonFacts is what charon's log says about the peer's IKE_SAs, newest last.
type charonFacts struct {
	received                   *charonEntry
	notifies                   map[string]bool
	macMismatch, noKey, lookup *charonEntry
	noPeerConfig, tsProblem    bool
	gatewayRetries             bool
	// packets are the IKE packets from the peer's remote address.
	packets int
}

func newPeerFacts(e *peerEvidence) *peerFacts {
	p := e.Peer
	f := &peerFacts{peerEvidence: e, authorized: e.Decision.Authorized, reason: e.Decision.Reason, message: e.Decision.Message}
	if c := meta.FindStatusCondition(p.Status.Conditions, vpnv1.ConditionAuthorized); c != nil {
		f.authorized, f.reason, f.message = c.Status == metav1.ConditionTrue, c.Reason, c.Message
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, status.ConditionCredentialsReady); c != nil && c.Status != metav1.ConditionTrue {
		f.credentials = c
	}
	f.conn = meta.FindStatusCondition(p.Status.Conditions, vpnv1.ConditionConnected)
	if f.conn != nil {
		f.connReason, f.connMsg = f.conn.Reason, f.conn.Message
	}
	f.configure = fmt.Sprintf("kubectl vpn peer-config %s -n %s --format <vendor> writes the client's configuration in its vendor's words", p.Name, p.Namespace)
	f.charon = readCharon(e.peerCharon())
	return f
}

func readCharon(sas []*ikeSA) charonFacts {
	f := charonFacts{notifies: map[string]bool{}}
	for _, sa := range sas {
		f.packets += sa.packetsFromRemote
		for i := range sa.entries {
			en := &sa.entries[i]
			switch en.Shape {
			case "proposals-received":
				f.received = en
			case "notify":
				f.notifies[en.Values[0]] = true
			case "mac-mismatch":
				f.macMismatch = en
			case "no-shared-key":
				f.noKey = en
			case "peer-config-lookup":
				f.lookup = en
			case "no-peer-config":
				f.noPeerConfig = true
			case "ts-unacceptable", "no-ts":
				f.tsProblem = true
			case "initiating", "retransmit", "giving-up", "not-responding":
				f.gatewayRetries = true
			}
		}
	}
	return f
}

// peerChecks are a peer's rules, in order.
var peerChecks = []check[peerFacts]{
	checkAuthorization,
	checkCredentials,
	checkTunnel,
	checkDeniedTraffic,
}

// peerFindings is the verdict on one peer (first) and further findings.
func peerFindings(e peerEvidence) []finding {
	return sortFindings(applyAll(peerChecks, newPeerFacts(&e)))
}

// checkAuthorization: the operator's word, else the model's.
func checkAuthorization(f *peerFacts) []finding {
	if f.authorized {
		return nil
	}
	s := fmt.Sprintf("not authorized (%s): %s", f.reason, f.message)
	if !slices.Contains(noTunnelReasons, f.reason) {
		s += "; its tunnel may come up but reaches nothing"
	}
	return []finding{{sevError, "NotAuthorized", s, authorizationNext(f.reason, f.Gateway, f.Peer, f.Offered)}}
}

func checkCredentials(f *peerFacts) []finding {
	c := f.credentials
	if c == nil {
		return nil
	}
	return []finding{{sevError, "CredentialsNotReady", fmt.Sprintf("credentials not ready (%s): %s", c.Reason, c.Message),
		credentialsNext(c.Reason, f.Peer.Namespace, gateways.PSKRef(f.Peer))}}
}

// tunnelChecks judge the Connected condition with charon's log (IPsec) or the handshake
// (WireGuard): the first that finds anything is the tunnel's finding. wireGuardTunnel decides
// every WireGuard tunnel; the checks after it are IPsec's, tunnelDown the last resort.
var tunnelChecks = []check[peerFacts]{
	tunnelEstablished,
	wireGuardTunnel,
	clientProposals,
	trafficSelectors,
	gatewayProposals,
	authenticationFailed,
	missingSecret,
	connecting,
	tunnelDown,
}

// checkTunnel judges the tunnel, unless the peer has none to judge: its authorization leaves
// it without one, or its credentials are not ready.
func checkTunnel(f *peerFacts) []finding {
	if (!f.authorized && slices.Contains(noTunnelReasons, f.reason)) || f.credentials != nil {
		return nil
	}
	return firstOf(tunnelChecks, f)
}

func tunnelEstablished(f *peerFacts) []finding {
	if f.conn == nil || f.conn.Status != metav1.ConditionTrue {
		return nil
	}
	s := "tunnel established"
	if t := f.Peer.Status.Tunnel; t != nil {
		if t.EstablishedAt != nil {
			s += " " + duration.HumanDuration(f.Now.Sub(t.EstablishedAt.Time)) + " ago"
		}
		s += fmt.Sprintf(" (%s in, %s out", status.HumanBytes(t.BytesIn), status.HumanBytes(t.BytesOut))
		if t.LastHandshake != nil {
			s += ", last handshake " + duration.HumanDuration(f.Now.Sub(t.LastHandshake.Time)) + " ago"
		}
		s += ")"
	}
	if len(f.Reaches) > 0 {
		s += "; reaches " + strings.Join(f.Reaches, ", ")
	}
	return []finding{{sevOK, "Established", s, ""}}
}

func wireGuardTunnel(f *peerFacts) []finding {
	p, gw := f.Peer, f.Gateway
	if gw.Spec.Protocol != vpnv1.ProtocolWireGuard {
		return nil
	}
	switch f.connReason {
	case "":
		return []finding{notReported(f.peerEvidence)}
	case "Connecting":
		return []finding{{sevInfo, "Connecting", "the tunnel is being negotiated: " + f.connMsg, ""}}
	}
	last := "never"
	if t := p.Status.Tunnel; t != nil && t.LastHandshake != nil {
		last = duration.HumanDuration(f.Now.Sub(t.LastHandshake.Time)) + " ago"
	}
	port := int32(vpnv1.DefaultWireGuardListenPort)
	if gw.Spec.WireGuard != nil && gw.Spec.WireGuard.ListenPort != 0 {
		port = gw.Spec.WireGuard.ListenPort
	}
	peerKey := ""
	if p.Spec.WireGuard != nil {
		peerKey = p.Spec.WireGuard.PublicKey
	}
	return []finding{{sevError, "NoHandshake",
		fmt.Sprintf("no WireGuard session with the client (%s: %s; last handshake %s)", f.connReason, f.connMsg, last),
		fmt.Sprintf("check that the client reaches %s on UDP %d, that its [Peer] PublicKey is the gateway's %s, that its own key pair is the one of public key %s (spec.wireguard.publicKey) and that its AllowedIPs include %s; %s",
			status.OrDash(gw.Status.PublicAddress), port, status.OrDash(gw.Status.WireGuardPublicKey), peerKey, status.OrDash(gw.Status.ServiceCIDR), f.configure)}}
}

// clientProposals: charon's log has what the client proposed and the gateway refused.
func clientProposals(f *peerFacts) []finding {
	if f.charon.received == nil {
		return nil
	}
	p, gw := f.Peer, f.Gateway
	client := deviceconfig.ParseCharonProposals(f.charon.received.Values[0])
	proto, allowed, where := "IKE", f.IKEProposals, fmt.Sprintf("spec.ipsec.ike.proposals of VPNGateway %s (shared by its peers without IKE settings of their own)", gw.Name)
	if p.Spec.IPsec != nil && p.Spec.IPsec.IKE != nil && len(p.Spec.IPsec.IKE.Proposals) > 0 {
		where = fmt.Sprintf("spec.ipsec.ike.proposals of VPNPeer %s", p.Name)
	}
	if len(client) > 0 && client[0].Protocol != "IKE" {
		proto, allowed, where = client[0].Protocol, f.ESPProposals, fmt.Sprintf("spec.ipsec.esp.proposals of VPNPeer %s", p.Name)
	}
	gwProps := make([]deviceconfig.Transforms, len(allowed))
	for i, a := range allowed {
		gwProps[i] = deviceconfig.ReadProposal(proto, a)
	}
	next := "configure the client with one of the gateway's " + proto + " proposals: " + f.configure
	if weak := weakIn(client); len(weak) > 0 {
		next += fmt.Sprintf(" (the client's %s %s weak: do not add them to the gateway)", strings.Join(weak, ", "), isAre(len(weak)))
	} else {
		next += "; or, if the client's proposal is acceptable to you, add it to " + where
	}
	return []finding{{sevError, "NoProposalChosen",
		fmt.Sprintf("%s: the client proposes %s; the gateway allows %s (%s)", proto, proposalList(client),
			strings.Join(allowed, ", "), mismatch(client, gwProps)), next}}
}

func trafficSelectors(f *peerFacts) []finding {
	if !f.charon.tsProblem && !f.charon.notifies["TS_UNACCEPTABLE"] && (f.connReason != "NoProposalChosen" || !strings.Contains(f.connMsg, "traffic selectors")) {
		return nil
	}
	p, gw := f.Peer, f.Gateway
	subnets := ""
	if p.Spec.IPsec != nil {
		subnets = strings.Join(p.Spec.IPsec.RemoteSubnets, ", ")
	}
	return []finding{{sevError, "TrafficSelectorsUnacceptable",
		fmt.Sprintf("the client's networks do not match the tunnel's: the gateway carries %s (the client's local networks) to %s (its remote network)", subnets, status.OrDash(gw.Status.ServiceCIDR)),
		fmt.Sprintf("configure the client's local networks as exactly %s and its remote network as %s; %s", subnets, status.OrDash(gw.Status.ServiceCIDR), f.configure)}}
}

// gatewayProposals: the client accepts none of the gateway's proposals.
func gatewayProposals(f *peerFacts) []finding {
	if f.connReason != "NoProposalChosen" && !f.charon.notifies["NO_PROPOSAL_CHOSEN"] {
		return nil
	}
	s := fmt.Sprintf("the client accepts none of the gateway's proposals: the gateway proposes IKE %s, ESP %s",
		strings.Join(f.IKEProposals, ", "), strings.Join(f.ESPProposals, ", "))
	next := "configure the client to accept one of them: " + f.configure
	if f.Charon == nil {
		next += " (charon's log, not read here, would show what the client proposes)"
	}
	return []finding{{sevError, "NoProposalChosen", s, next}}
}

func authenticationFailed(f *peerFacts) []finding {
	ch := f.charon
	if f.connReason != "AuthFailed" && ch.macMismatch == nil && ch.noKey == nil && !ch.noPeerConfig && !ch.notifies["AUTHENTICATION_FAILED"] {
		return nil
	}
	p, gw := f.Peer, f.Gateway
	localID := model.GatewayLocalID(gw, gw.Status.PublicAddress)
	remoteID := remoteIDOf(p)
	secret := "the peer's Secret"
	if ref := gateways.PSKRef(p); ref != nil {
		secret = fmt.Sprintf("Secret %s (key %s)", ref.Name, ref.Key)
	}
	var s string
	switch {
	case ch.macMismatch != nil:
		s = fmt.Sprintf("the pre-shared keys differ: the gateway (%q) checked the client's (%q) authentication with the key of %s and it did not match",
			ch.macMismatch.Values[1], ch.macMismatch.Values[2], secret)
	case ch.noKey != nil && model.NormalizeID(ch.noKey.Values[1]) != model.NormalizeID(remoteID):
		s = fmt.Sprintf("identity mismatch: the client presents itself as %q; the gateway expects %q", ch.noKey.Values[1], remoteID)
	case ch.noKey != nil:
		s = fmt.Sprintf("identity mismatch: the client addresses the gateway as %q; the gateway is %q", ch.noKey.Values[0], localID)
	case ch.noPeerConfig && ch.lookup != nil:
		s = fmt.Sprintf("identity mismatch: the client presents itself as %q and expects the gateway as %q; this peer is %q and the gateway %q",
			ch.lookup.Values[3], ch.lookup.Values[1], remoteID, localID)
	case ch.notifies["AUTHENTICATION_FAILED"]:
		s = fmt.Sprintf("the client rejected the gateway's authentication: its key for the gateway differs from %s, or it expects the gateway as another identity than %q", secret, localID)
	default:
		s = "authentication failed: " + f.connMsg
	}
	return []finding{{sevError, "AuthenticationFailed", s,
		fmt.Sprintf("on the client: local identity %q, remote identity %q, and the pre-shared key of %s — compare it there, never paste it anywhere; kubectl vpn peer-config %s -n %s --format <vendor> --include-secrets writes the device configuration with it",
			remoteID, localID, secret, p.Name, p.Namespace)}}
}

func missingSecret(f *peerFacts) []finding {
	if f.connReason != "MissingSecret" {
		return nil
	}
	return []finding{{sevError, "MissingSecret", "the gateway agent cannot read the key: " + f.connMsg, credentialsNext("SecretNotFound", f.Peer.Namespace, gateways.PSKRef(f.Peer))}}
}

func connecting(f *peerFacts) []finding {
	if f.connReason != "Connecting" {
		return nil
	}
	return []finding{{sevInfo, "Connecting", "the tunnel is being negotiated: " + f.connMsg, ""}}
}

// tunnelDown: down, or not reported, and nothing known failed; what charon's log says about
// the client's packets.
func tunnelDown(f *peerFacts) []finding {
	p, gw := f.Peer, f.Gateway
	ns := p.Namespace
	var out []finding
	if f.conn == nil {
		out = append(out, notReported(f.peerEvidence))
	}
	if f.Charon == nil {
		if f.conn != nil {
			out = append(out, finding{sevWarning, "Down", fmt.Sprintf("no tunnel (%s: %s); charon's log could not be read", f.connReason, f.connMsg),
				fmt.Sprintf("read charon's log: kubectl -n %s logs -l %s=%s -c %s", ns, children.LabelGateway, gw.Name, children.ContainerCharon)})
		}
		return out
	}
	address := ""
	if p.Spec.IPsec != nil {
		address = p.Spec.IPsec.Peer.Address
	}
	from := address
	if address == "%any" {
		from = "the client (any address)"
	}
	if f.charon.packets == 0 {
		s := fmt.Sprintf("no IKE packet from %s in the last %d lines of charon's log", from, f.CharonLines)
		if f.charon.gatewayRetries || strings.HasPrefix(f.connMsg, "no answer from") {
			s += "; the gateway's own initiations get no answer"
		}
		next := fmt.Sprintf("check that the client reaches %s on UDP 500 and 4500 (firewalls and security groups on the way, the client's NAT), that its outside address is %s (spec.ipsec.peer.address) and that it initiates",
			status.OrDash(gw.Status.PublicAddress), address)
		if address == "%any" {
			next = fmt.Sprintf("check that the client reaches %s on UDP 500 and 4500 (firewalls and security groups on the way, the client's NAT) and that it initiates: with address %%any only the client can", status.OrDash(gw.Status.PublicAddress))
		}
		return append(out, finding{sevError, "NoIKEPackets", s, next})
	}
	if f.conn != nil {
		out = append(out, finding{sevWarning, "NotEstablished",
			fmt.Sprintf("IKE packets from %s arrive but no tunnel is up (%s: %s)", from, f.connReason, f.connMsg),
			fmt.Sprintf("see charon's lines below, or all of them: kubectl -n %s logs -l %s=%s -c %s", ns, children.LabelGateway, gw.Name, children.ContainerCharon)})
	}
	return out
}

// checkDeniedTraffic: the packets the agent dropped by authorization, rising between the two
// reads or not.
func checkDeniedTraffic(f *peerFacts) []finding {
	m := f.Metrics
	if m == nil {
		return nil
	}
	total := m.DropsIn + m.DropsOut
	may := "it may reach nothing"
	if f.authorized && len(f.Reaches) > 0 {
		may = "it may reach only " + strings.Join(f.Reaches, ", ")
	}
	grant := fmt.Sprintf("grant more in spec.authorization.exposures of VPNPeer %s if it should reach more, else find what the client sends there", f.Peer.Name)
	switch {
	case f.Earlier != nil && total > f.Earlier.DropsIn+f.Earlier.DropsOut:
		delta := total - f.Earlier.DropsIn - f.Earlier.DropsOut
		return []finding{{sevWarning, "DeniedTraffic",
			fmt.Sprintf("the peer sends traffic it is not granted: %d packets dropped by authorization in %s (%d in, %d out since the agent started); %s",
				delta, f.Interval, m.DropsIn, m.DropsOut, may), grant}}
	case total > 0:
		when := ""
		if f.Earlier != nil {
			when = fmt.Sprintf(", none in the last %s", f.Interval)
		}
		return []finding{{sevInfo, "DeniedTraffic",
			fmt.Sprintf("%d packets dropped by authorization since the agent started (%d in, %d out%s); %s",
				total, m.DropsIn, m.DropsOut, when, may), grant}}
	}
	return nil
}

func notReported(e *peerEvidence) finding {
	return finding{sevWarning, "NotReported", "the gateway agent has not reported this peer's tunnel (no Connected condition)",
		fmt.Sprintf("see the gateway's agent above: is its pod running? (kubectl -n %s get pods -l %s=%s)", e.Peer.Namespace, children.LabelGateway, e.Gateway.Name)}
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

func authorizationNext(reason string, gw *vpnv1.VPNGateway, p *vpnv1.VPNPeer, offered []string) string {
	offers := "none"
	if len(offered) > 0 {
		offers = strings.Join(offered, ", ")
	}
	switch reason {
	case model.ReasonNoGrants:
		return fmt.Sprintf("grant what it needs in spec.authorization.exposures of VPNPeer %s (VPNGateway %s offers: %s); a gateway with more than one peer is default-deny", p.Name, gw.Name, offers)
	case model.ReasonUnknownGrant:
		return fmt.Sprintf("name only exposures VPNGateway %s has (%s) in spec.authorization of VPNPeer %s, or add the missing one to the gateway", gw.Name, offers, p.Name)
	case model.ReasonProtocolMismatch:
		return fmt.Sprintf("VPNGateway %s speaks %s: give the peer a spec.%s section (and no other)", gw.Name, gw.Spec.Protocol, gw.Spec.Protocol)
	case model.ReasonGatewayNotFound:
		return fmt.Sprintf("create VPNGateway %s in namespace %s, or correct spec.gatewayRef", p.Spec.GatewayRef, p.Namespace)
	case model.ReasonSubnetConflict:
		return "the overlapping subnets are an older peer's (the message names it): take them out of this peer, or out of the other one if they are this client's"
	case model.ReasonSubnetOverlapsServiceCIDR:
		return fmt.Sprintf("the client's networks must not overlap the gateway's service CIDR %s: leave the subnet out, or give the gateway another spec.serviceCIDR", status.OrDash(gw.Status.ServiceCIDR))
	case model.ReasonSubnetOverlapsClusterRange:
		return "the cluster uses that range itself: the client's network must be left out or renumbered"
	case model.ReasonDuplicateIdentity:
		return "give the peer an identity of its own (spec.ipsec.peer.id, or its own WireGuard key pair); the older peer keeps this one"
	case model.ReasonInvalidIdentity:
		return "set spec.ipsec.peer.id to the client's exact identity (no wildcard)"
	case model.ReasonCredentialsRefused:
		return fmt.Sprintf("keep the key in an Opaque Secret (kubectl -n %s create secret generic %s-psk --from-literal=psk=<the key>) and point the peer's secret reference at it", p.Namespace, p.Name)
	case model.ReasonReverseExposureOutsideSubnets:
		return "grant a reverse exposure only to the peer whose subnets contain its target, or add the target's network to this peer's subnets"
	}
	return "see the Authorized condition's message"
}

func credentialsNext(reason, ns string, ref *vpnv1.SecretKeyRef) string {
	if ref == nil {
		return "see the CredentialsReady condition's message"
	}
	switch reason {
	case "SecretNotFound":
		return fmt.Sprintf("create Secret %s with key %s holding the pre-shared key agreed with the client: kubectl -n %s create secret generic %s --from-literal=%s=<the key>",
			ref.Name, ref.Key, ns, ref.Name, ref.Key)
	case "SecretKeyMissing":
		return fmt.Sprintf("add key %s (the pre-shared key) to Secret %s", ref.Key, ref.Name)
	case "SecretTypeNotAllowed":
		return fmt.Sprintf("Secret %s is not Opaque: keep the key in an Opaque Secret and point the peer at it", ref.Name)
	}
	return "see the CredentialsReady condition's message"
}

// --- the gateway ---

// gatewayFacts are the evidence on the gateway and its readiness as the operator orders it.
type gatewayFacts struct {
	*gatewayEvidence
	ready status.ConditionReport
	cause *status.CauseReport
}

// gatewayChecks are the gateway's rules, in order.
var gatewayChecks = []check[gatewayFacts]{
	checkReady,
	checkStatusBehind,
	checkPod,
	checkMetricsReadable,
	checkLogsReadable,
	checkRulesetRepaired,
	checkSpoofedTraffic,
	checkConfigRejected,
	checkAgentErrors,
}

// gatewayFindings is the verdict on the gateway (first) and further findings.
func gatewayFindings(e gatewayEvidence) []finding {
	f := &gatewayFacts{gatewayEvidence: &e}
	f.ready, f.cause = status.Readiness(e.Gateway)
	return sortFindings(applyAll(gatewayChecks, f))
}

func checkReady(f *gatewayFacts) []finding {
	ready, cause := f.ready, f.cause
	switch {
	case !ready.Reported:
		return []finding{{sevWarning, "NotReported", ready.Message,
			"is the operator running? (kubectl get pods -A -l app.kubernetes.io/name=bnerd-vpn-operator)"}}
	case ready.Status != "True" && cause != nil:
		return []finding{{sevError, "NotReady", fmt.Sprintf("not Ready: %s %s: %s", cause.Condition, cause.Reason, cause.Message),
			readyNext(f.Gateway, cause.Condition, cause.Reason)}}
	case ready.Status != "True":
		return []finding{{sevError, "NotReady", fmt.Sprintf("not Ready (%s): %s", ready.Reason, ready.Message), "see the gateway's conditions"}}
	}
	return []finding{{sevOK, "Ready", "the gateway is Ready", ""}}
}

func checkStatusBehind(f *gatewayFacts) []finding {
	gw := f.Gateway
	if c := meta.FindStatusCondition(gw.Status.Conditions, vpnv1.ConditionReady); c == nil || gw.Status.ObservedGeneration >= gw.Generation {
		return nil
	}
	return []finding{{sevWarning, "StatusBehind",
		fmt.Sprintf("the status is of generation %d; the spec is at %d: the operator has not caught up", gw.Status.ObservedGeneration, gw.Generation),
		"wait, or see the operator's log"}}
}

// checkPod: no gateway pod (unless the gateway's readiness already says so), or one that is not
// running and ready.
func checkPod(f *gatewayFacts) []finding {
	gw := f.Gateway
	ns := gw.Namespace
	switch {
	case f.Pod == nil:
		if f.cause == nil || f.cause.Condition != vpnv1.ConditionGatewayAvailable {
			return []finding{{sevWarning, "NoPod", "no gateway pod: " + f.NoPod,
				fmt.Sprintf("kubectl -n %s describe deployment %s (the operator creates it once the gateway is rendered)", ns, children.Name(gw.Name))}}
		}
	case f.Pod.DeletionTimestamp != nil || f.Pod.Status.Phase != corev1.PodRunning || !gateways.PodReady(f.Pod):
		return []finding{{sevWarning, "PodNotReady", fmt.Sprintf("gateway pod %s: %s", f.Pod.Name, podState(f.Pod)),
			fmt.Sprintf("kubectl -n %s describe pod -l %s=%s", ns, children.LabelGateway, gw.Name)}}
	}
	return nil
}

func checkMetricsReadable(f *gatewayFacts) []finding {
	if f.Pod == nil || f.Metrics != nil || f.MetricsErr == "" {
		return nil
	}
	return []finding{{sevInfo, "MetricsUnreadable", "the agent's metrics could not be read (" + f.MetricsErr + "): drops, repairs and rejected configurations are unknown",
		"diagnose needs get on pods/proxy in the namespace, and the API server must reach the pod's metrics port"}}
}

func checkLogsReadable(f *gatewayFacts) []finding {
	if f.Pod == nil || f.Agent != nil || f.LogErr == "" {
		return nil
	}
	return []finding{{sevInfo, "LogsUnreadable", "the gateway pod's logs could not be read: " + f.LogErr,
		"diagnose needs get on pods/log in the namespace"}}
}

// lastEvent is " (last, AGE ago: MESSAGE)" of the newest Event of that reason, or "".
func (f *gatewayFacts) lastEvent(reason string) string {
	for i := len(f.Events) - 1; i >= 0; i-- {
		if f.Events[i].Reason == reason {
			return fmt.Sprintf(" (last, %s ago: %s)", duration.HumanDuration(f.Now.Sub(f.Events[i].Time)), f.Events[i].Message)
		}
	}
	return ""
}

func checkRulesetRepaired(f *gatewayFacts) []finding {
	if f.Metrics == nil || f.Metrics.RulesetRepairs == nil || *f.Metrics.RulesetRepairs == 0 {
		return nil
	}
	next := "something changes nftables in the pod's network namespace: check the node's CNI and anything else running there"
	if h := f.Gateway.Spec.Endpoint.HostNetwork; h != nil {
		next = fmt.Sprintf("something on node %s rewrites nftables (a `systemctl restart nftables`, a firewall manager): find it and keep it off the gateway's table", h.NodeName)
	}
	return []finding{{sevWarning, "RulesetRepaired",
		fmt.Sprintf("the agent found the gateway's nftables table changed or missing and re-applied it %d times since it started%s", *f.Metrics.RulesetRepairs, f.lastEvent("RulesetRepaired")), next}}
}

func checkSpoofedTraffic(f *gatewayFacts) []finding {
	if f.Metrics == nil || f.Metrics.SpoofedDrops == nil || *f.Metrics.SpoofedDrops == 0 {
		return nil
	}
	return []finding{{sevWarning, "SpoofedTraffic",
		fmt.Sprintf("%d packets came through a peer's SA from a source outside that peer's subnets (another peer's or no peer's) and were dropped since the agent started", *f.Metrics.SpoofedDrops),
		fmt.Sprintf("the counter names no peer: find the client that sends from addresses its VPNPeer does not list (kubectl -n %s get vpnpeers -o yaml, spec.ipsec.remoteSubnets); a LAN renumbered or NAT missing on the client, else a peer passing as another", f.Gateway.Namespace)}}
}

func checkConfigRejected(f *gatewayFacts) []finding {
	if f.Metrics == nil || f.Metrics.ConfigRejected == nil || *f.Metrics.ConfigRejected == 0 {
		return nil
	}
	ns := f.Gateway.Namespace
	cm := children.ConfigMapName(f.Gateway.Name)
	return []finding{{sevWarning, "ConfigRejected",
		fmt.Sprintf("the agent refused %d configurations since it started; the last good one stays applied%s", *f.Metrics.ConfigRejected, f.lastEvent("ConfigRejected")),
		fmt.Sprintf("ConfigMap %s must carry model.json alone, as the operator writes it: undo the hand edit (kubectl -n %s edit configmap %s)", cm, ns, cm)}}
}

func checkAgentErrors(f *gatewayFacts) []finding {
	if f.Agent == nil {
		return nil
	}
	entries, _ := parseAgent(f.Agent)
	var errs []agentEntry
	for _, en := range entries {
		if en.Level == "error" || en.Level == "dpanic" || en.Level == "panic" || en.Level == "fatal" {
			errs = append(errs, en)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	last := errs[len(errs)-1]
	return []finding{{sevInfo, "AgentErrors",
		fmt.Sprintf("the agent logged %s in its last %d lines (last, %s ago: %s)", plural(len(errs), "error"), f.AgentTail, duration.HumanDuration(f.Now.Sub(last.Time)), last),
		fmt.Sprintf("kubectl -n %s logs %s -c %s", f.Gateway.Namespace, f.Pod.Name, children.ContainerAgent)}}
}

// podState describes a pod that is not running and ready: its phase and the containers'
// waiting or terminated reasons.
func podState(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "terminating"
	}
	s := string(p.Status.Phase)
	if s == "" {
		s = "Pending"
	}
	var cs []string
	for _, c := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		switch {
		case c.State.Waiting != nil && c.State.Waiting.Reason != "":
			cs = append(cs, fmt.Sprintf("%s %s (%d restarts)", c.Name, c.State.Waiting.Reason, c.RestartCount))
		case c.State.Terminated != nil && c.State.Terminated.Reason != "" && c.State.Terminated.Reason != "Completed":
			cs = append(cs, fmt.Sprintf("%s %s", c.Name, c.State.Terminated.Reason))
		case c.State.Running != nil && !c.Ready:
			cs = append(cs, c.Name+" not ready")
		}
	}
	if len(cs) > 0 {
		s += ": " + strings.Join(cs, ", ")
	} else if p.Status.Phase == corev1.PodRunning {
		s += ", not ready"
	}
	return s
}

func readyNext(gw *vpnv1.VPNGateway, cond, reason string) string {
	ns, name := gw.Namespace, gw.Name
	switch cond {
	case vpnv1.ConditionAddressesAllocated:
		switch reason {
		case "PoolExhausted":
			return "every /24 of the operator's --service-cidr-pool is taken: delete an unused gateway or widen the pool"
		case "ServiceCIDRConflict":
			return "spec.serviceCIDR overlaps another gateway's: choose a free one, or leave it out to be given one"
		case "ServiceCIDRChanged":
			return fmt.Sprintf("a service CIDR cannot change once assigned (the clients route it): restore spec.serviceCIDR to %s", status.OrDash(gw.Status.ServiceCIDR))
		}
	case vpnv1.ConditionConfigValid:
		return fmt.Sprintf("correct what the message names in VPNGateway %s (or the Service it targets)", name)
	case "GrantsValid":
		return "correct the peers the message names"
	case "KeyReady":
		return "spec.wireguard.privateKeySecretRef must name an Opaque Secret holding a base64 32-byte key, or be left out to have one generated"
	case vpnv1.ConditionEndpointReady:
		switch reason {
		case "Provisioning":
			return fmt.Sprintf("wait: the public endpoint is being provisioned (kubectl -n %s get svc,events)", ns)
		case "NotPermitted":
			return fmt.Sprintf("host network is not allowed in namespace %s: the cluster admin labels it vpn.bnerd.net/host-network=allowed, or use another endpoint", ns)
		case "Conflict":
			return "another host-network gateway holds the node (the message names it): use another node or endpoint"
		case "QuotaExceeded":
			return "the cloud project's quota is exhausted: free or raise it"
		case "ProviderNotConfigured":
			return "the operator has no cloud provider for this endpoint kind: configure it (--openstack-*) or use another endpoint"
		case "NotFound":
			return "the floating IP or pool does not exist in the cloud: correct spec.endpoint"
		case "AuthFailed":
			return "the operator's cloud credentials are refused: renew them"
		}
		return "see the EndpointReady message and the operator's log"
	case vpnv1.ConditionRendered:
		return "see the operator's log (kubectl -n bnerd-vpn-system logs deploy/bnerd-vpn-operator)"
	case vpnv1.ConditionGatewayAvailable:
		if reason == "NotCreated" {
			return "the gateway's Deployment is not there yet: see the Rendered condition and the operator's log"
		}
		return fmt.Sprintf("kubectl -n %s describe pod -l %s=%s", ns, children.LabelGateway, name)
	}
	return "see the condition's message"
}
