package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// The verdicts are pure functions of what diagnose collected (conditions, events, the agent's
// metrics, log lines): table-tested in verdict_test.go.

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

// sortFindings orders findings most severe first, keeping the rules' order among equals; the
// first is the verdict.
func sortFindings(f []finding) []finding {
	slices.SortStableFunc(f, func(a, b finding) int { return severityRank[a.Severity] - severityRank[b.Severity] })
	return f
}

// eventFact is one Event on the gateway or a peer (core/v1 or events.k8s.io/v1).
type eventFact struct {
	UID     string    `json:"-"`
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Kind    string    `json:"kind"`
	Name    string    `json:"name"`
	Count   int32     `json:"count"`
}

// peerEvidence is everything diagnose knows about one peer.
type peerEvidence struct {
	Gateway *vpnv1.VPNGateway
	Peer    *vpnv1.VPNPeer
	// Decision is the model's (the operator's code) computed here; the peer's Authorized
	// condition wins when reported.
	Decision model.Decision
	// Reaches describes what the peer may reach, e.g. `web (100.64.0.10 8080)`; empty: nothing.
	Reaches []string
	// Offered are the gateway's exposures by name.
	Offered []string
	// IKEProposals and ESPProposals are the peer's tunnel's, defaults applied (as the model has them).
	IKEProposals, ESPProposals []string
	Events                     []eventFact
	// Metrics is the agent's view (nil: not read); Earlier an earlier sample Interval before.
	Metrics, Earlier *peerMetrics
	Interval         time.Duration
	// Charon is the tail of charon's log (nil: not read); CharonLines how many were asked for.
	Charon      []logLine
	CharonLines int
	Now         time.Time
}

// peerCharon is the part of charon's log about this peer: its IKE_SAs (by connection name,
// or by address or identity while charon does not know the connection yet).
func (e *peerEvidence) peerCharon() []*ikeSA {
	if e.Charon == nil || e.Peer.Spec.IPsec == nil {
		return nil
	}
	entries, _ := parseCharon(e.Charon)
	return peerSAs(charonSAs(entries), e.Peer.Name, e.Peer.Spec.IPsec.Peer.Address, remoteIDOf(e.Peer))
}

func remoteIDOf(p *vpnv1.VPNPeer) string {
	if p.Spec.IPsec == nil {
		return ""
	}
	if p.Spec.IPsec.Peer.ID != "" {
		return p.Spec.IPsec.Peer.ID
	}
	return p.Spec.IPsec.Peer.Address
}

// noTunnelReasons are Authorized reasons that leave the peer without any tunnel: its
// connection state follows from them.
var noTunnelReasons = []string{
	model.ReasonProtocolMismatch, model.ReasonGatewayNotFound, model.ReasonDuplicateIdentity,
	model.ReasonInvalidIdentity, model.ReasonCredentialsRefused,
}

// peerFindings is the verdict on one peer (first) and further findings.
func peerFindings(e peerEvidence) []finding {
	p, gw := e.Peer, e.Gateway
	ns := p.Namespace
	var out []finding

	// A. authorization: the operator's word, else the model's
	authz := meta.FindStatusCondition(p.Status.Conditions, vpnv1.ConditionAuthorized)
	authorized, reason, message := e.Decision.Authorized, e.Decision.Reason, e.Decision.Message
	if authz != nil {
		authorized, reason, message = authz.Status == metav1.ConditionTrue, authz.Reason, authz.Message
	}
	if !authorized {
		s := fmt.Sprintf("not authorized (%s): %s", reason, message)
		if !slices.Contains(noTunnelReasons, reason) {
			s += "; its tunnel may come up but reaches nothing"
		}
		out = append(out, finding{sevError, "NotAuthorized", s, authorizationNext(reason, gw, p, e.Offered)})
	}
	skipTunnel := !authorized && slices.Contains(noTunnelReasons, reason)

	// B. credentials
	ref := pskRef(p)
	if c := meta.FindStatusCondition(p.Status.Conditions, conditionCredentialsReady); c != nil && c.Status != metav1.ConditionTrue {
		out = append(out, finding{sevError, "CredentialsNotReady", fmt.Sprintf("credentials not ready (%s): %s", c.Reason, c.Message),
			credentialsNext(c.Reason, ns, ref)})
		skipTunnel = true
	}

	// C. the tunnel
	if !skipTunnel {
		out = append(out, tunnelFindings(&e)...)
	}

	// D. authorization drops
	if m := e.Metrics; m != nil {
		total := m.DropsIn + m.DropsOut
		may := "it may reach nothing"
		if authorized && len(e.Reaches) > 0 {
			may = "it may reach only " + strings.Join(e.Reaches, ", ")
		}
		grant := fmt.Sprintf("grant more in spec.authorization.exposures of VPNPeer %s if it should reach more, else find what the client sends there", p.Name)
		switch {
		case e.Earlier != nil && total > e.Earlier.DropsIn+e.Earlier.DropsOut:
			delta := total - e.Earlier.DropsIn - e.Earlier.DropsOut
			out = append(out, finding{sevWarning, "DeniedTraffic",
				fmt.Sprintf("the peer sends traffic it is not granted: %d packets dropped by authorization in %s (%d in, %d out since the agent started); %s",
					delta, e.Interval, m.DropsIn, m.DropsOut, may), grant})
		case total > 0:
			when := ""
			if e.Earlier != nil {
				when = fmt.Sprintf(", none in the last %s", e.Interval)
			}
			out = append(out, finding{sevInfo, "DeniedTraffic",
				fmt.Sprintf("%d packets dropped by authorization since the agent started (%d in, %d out%s); %s",
					total, m.DropsIn, m.DropsOut, when, may), grant})
		}
	}
	return sortFindings(out)
}

// tunnelFindings judge the Connected condition with charon's log (IPsec) or the handshake
// (WireGuard).
func tunnelFindings(e *peerEvidence) []finding {
	p, gw := e.Peer, e.Gateway
	ns := p.Namespace
	conn := meta.FindStatusCondition(p.Status.Conditions, vpnv1.ConditionConnected)
	if conn != nil && conn.Status == metav1.ConditionTrue {
		s := "tunnel established"
		if t := p.Status.Tunnel; t != nil {
			if t.EstablishedAt != nil {
				s += " " + duration.HumanDuration(e.Now.Sub(t.EstablishedAt.Time)) + " ago"
			}
			s += fmt.Sprintf(" (%s in, %s out", humanBytes(t.BytesIn), humanBytes(t.BytesOut))
			if t.LastHandshake != nil {
				s += ", last handshake " + duration.HumanDuration(e.Now.Sub(t.LastHandshake.Time)) + " ago"
			}
			s += ")"
		}
		if len(e.Reaches) > 0 {
			s += "; reaches " + strings.Join(e.Reaches, ", ")
		}
		return []finding{{sevOK, "Established", s, ""}}
	}
	connReason, connMsg := "", ""
	if conn != nil {
		connReason, connMsg = conn.Reason, conn.Message
	}
	configure := fmt.Sprintf("kubectl vpn peer-config %s -n %s --format <vendor> writes the client's configuration in its vendor's words", p.Name, ns)

	if gw.Spec.Protocol == vpnv1.ProtocolWireGuard {
		switch connReason {
		case "":
			return []finding{notReported(e)}
		case "Connecting":
			return []finding{{sevInfo, "Connecting", "the tunnel is being negotiated: " + connMsg, ""}}
		}
		last := "never"
		if t := p.Status.Tunnel; t != nil && t.LastHandshake != nil {
			last = duration.HumanDuration(e.Now.Sub(t.LastHandshake.Time)) + " ago"
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
			fmt.Sprintf("no WireGuard session with the client (%s: %s; last handshake %s)", connReason, connMsg, last),
			fmt.Sprintf("check that the client reaches %s on UDP %d, that its [Peer] PublicKey is the gateway's %s, that its own key pair is the one of public key %s (spec.wireguard.publicKey) and that its AllowedIPs include %s; %s",
				orDash(gw.Status.PublicAddress), port, orDash(gw.Status.WireGuardPublicKey), peerKey, orDash(gw.Status.ServiceCIDR), configure)}}
	}

	// IPsec: what charon's log says about this peer's IKE_SAs, newest last
	sas := e.peerCharon()
	var received *charonEntry
	notifies := map[string]bool{}
	var macMismatch, noKey, lookup *charonEntry
	noPeerConfig, tsProblem, gatewayRetries := false, false, false
	packets := 0
	for _, sa := range sas {
		packets += sa.packetsFromRemote
		for i := range sa.entries {
			en := &sa.entries[i]
			switch en.Shape {
			case "proposals-received":
				received = en
			case "notify":
				notifies[en.Values[0]] = true
			case "mac-mismatch":
				macMismatch = en
			case "no-shared-key":
				noKey = en
			case "peer-config-lookup":
				lookup = en
			case "no-peer-config":
				noPeerConfig = true
			case "ts-unacceptable", "no-ts":
				tsProblem = true
			case "initiating", "retransmit", "giving-up", "not-responding":
				gatewayRetries = true
			}
		}
	}
	localID := model.GatewayLocalID(gw, gw.Status.PublicAddress)
	remoteID := remoteIDOf(p)
	address := p.Spec.IPsec.Peer.Address

	switch {
	case received != nil:
		client := parseCharonProposals(received.Values[0])
		proto, allowed, where := "IKE", e.IKEProposals, fmt.Sprintf("spec.ipsec.ike.proposals of VPNGateway %s (shared by all its peers)", gw.Name)
		if len(client) > 0 && client[0].Protocol != "IKE" {
			proto, allowed, where = client[0].Protocol, e.ESPProposals, fmt.Sprintf("spec.ipsec.esp.proposals of VPNPeer %s", p.Name)
		}
		gwProps := make([]swanProposal, len(allowed))
		for i, a := range allowed {
			gwProps[i] = parseKeywordProposal(proto, a)
		}
		next := "configure the client with one of the gateway's " + proto + " proposals: " + configure
		if weak := weakIn(client); len(weak) > 0 {
			next += fmt.Sprintf(" (the client's %s %s weak: do not add them to the gateway)", strings.Join(weak, ", "), isAre(len(weak)))
		} else {
			next += "; or, if the client's proposal is acceptable to you, add it to " + where
		}
		return []finding{{sevError, "NoProposalChosen",
			fmt.Sprintf("%s: the client proposes %s; the gateway allows %s (%s)", proto, proposalList(client),
				strings.Join(allowed, ", "), mismatch(client, gwProps)), next}}

	case tsProblem || notifies["TS_UNACCEPTABLE"] || (connReason == "NoProposalChosen" && strings.Contains(connMsg, "traffic selectors")):
		subnets := ""
		if p.Spec.IPsec != nil {
			subnets = strings.Join(p.Spec.IPsec.RemoteSubnets, ", ")
		}
		return []finding{{sevError, "TrafficSelectorsUnacceptable",
			fmt.Sprintf("the client's networks do not match the tunnel's: the gateway carries %s (the client's local networks) to %s (its remote network)", subnets, orDash(gw.Status.ServiceCIDR)),
			fmt.Sprintf("configure the client's local networks as exactly %s and its remote network as %s; %s", subnets, orDash(gw.Status.ServiceCIDR), configure)}}

	case connReason == "NoProposalChosen" || notifies["NO_PROPOSAL_CHOSEN"]:
		s := fmt.Sprintf("the client accepts none of the gateway's proposals: the gateway proposes IKE %s, ESP %s",
			strings.Join(e.IKEProposals, ", "), strings.Join(e.ESPProposals, ", "))
		next := "configure the client to accept one of them: " + configure
		if e.Charon == nil {
			next += " (charon's log, not read here, would show what the client proposes)"
		}
		return []finding{{sevError, "NoProposalChosen", s, next}}

	case connReason == "AuthFailed" || macMismatch != nil || noKey != nil || noPeerConfig || notifies["AUTHENTICATION_FAILED"]:
		secret := "the peer's Secret"
		if ref := pskRef(p); ref != nil {
			secret = fmt.Sprintf("Secret %s (key %s)", ref.Name, ref.Key)
		}
		var s string
		switch {
		case macMismatch != nil:
			s = fmt.Sprintf("the pre-shared keys differ: the gateway (%q) checked the client's (%q) authentication with the key of %s and it did not match",
				macMismatch.Values[1], macMismatch.Values[2], secret)
		case noKey != nil && model.NormalizeID(noKey.Values[1]) != model.NormalizeID(remoteID):
			s = fmt.Sprintf("identity mismatch: the client presents itself as %q; the gateway expects %q", noKey.Values[1], remoteID)
		case noKey != nil:
			s = fmt.Sprintf("identity mismatch: the client addresses the gateway as %q; the gateway is %q", noKey.Values[0], localID)
		case noPeerConfig && lookup != nil:
			s = fmt.Sprintf("identity mismatch: the client presents itself as %q and expects the gateway as %q; this peer is %q and the gateway %q",
				lookup.Values[3], lookup.Values[1], remoteID, localID)
		case notifies["AUTHENTICATION_FAILED"]:
			s = fmt.Sprintf("the client rejected the gateway's authentication: its key for the gateway differs from %s, or it expects the gateway as another identity than %q", secret, localID)
		default:
			s = "authentication failed: " + connMsg
		}
		return []finding{{sevError, "AuthenticationFailed", s,
			fmt.Sprintf("on the client: local identity %q, remote identity %q, and the pre-shared key of %s — compare it there, never paste it anywhere; kubectl vpn peer-config %s -n %s --format <vendor> --include-secrets writes the device configuration with it",
				remoteID, localID, secret, p.Name, ns)}}

	case connReason == "MissingSecret":
		return []finding{{sevError, "MissingSecret", "the gateway agent cannot read the key: " + connMsg, credentialsNext("SecretNotFound", ns, pskRef(p))}}

	case connReason == "Connecting":
		return []finding{{sevInfo, "Connecting", "the tunnel is being negotiated: " + connMsg, ""}}
	}

	// Down, or not reported
	var out []finding
	if conn == nil {
		out = append(out, notReported(e))
	}
	if e.Charon == nil {
		if conn != nil {
			out = append(out, finding{sevWarning, "Down", fmt.Sprintf("no tunnel (%s: %s); charon's log could not be read", connReason, connMsg),
				fmt.Sprintf("read charon's log: kubectl -n %s logs -l %s=%s -c %s", ns, children.LabelGateway, gw.Name, children.ContainerCharon)})
		}
		return out
	}
	from := address
	if address == "%any" {
		from = "the client (any address)"
	}
	if packets == 0 {
		s := fmt.Sprintf("no IKE packet from %s in the last %d lines of charon's log", from, e.CharonLines)
		if gatewayRetries || strings.HasPrefix(connMsg, "no answer from") {
			s += "; the gateway's own initiations get no answer"
		}
		next := fmt.Sprintf("check that the client reaches %s on UDP 500 and 4500 (firewalls and security groups on the way, the client's NAT), that its outside address is %s (spec.ipsec.peer.address) and that it initiates",
			orDash(gw.Status.PublicAddress), address)
		if address == "%any" {
			next = fmt.Sprintf("check that the client reaches %s on UDP 500 and 4500 (firewalls and security groups on the way, the client's NAT) and that it initiates: with address %%any only the client can", orDash(gw.Status.PublicAddress))
		}
		return append(out, finding{sevError, "NoIKEPackets", s, next})
	}
	if conn != nil {
		out = append(out, finding{sevWarning, "NotEstablished",
			fmt.Sprintf("IKE packets from %s arrive but no tunnel is up (%s: %s)", from, connReason, connMsg),
			fmt.Sprintf("see charon's lines below, or all of them: kubectl -n %s logs -l %s=%s -c %s", ns, children.LabelGateway, gw.Name, children.ContainerCharon)})
	}
	return out
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
		return fmt.Sprintf("the client's networks must not overlap the gateway's service CIDR %s: leave the subnet out, or give the gateway another spec.serviceCIDR", orDash(gw.Status.ServiceCIDR))
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

// gatewayEvidence is what diagnose knows about the gateway itself.
type gatewayEvidence struct {
	Gateway *vpnv1.VPNGateway
	Pod     *corev1.Pod
	NoPod   string
	// Metrics is the agent's view (nil: not read, MetricsErr says why).
	Metrics    *agentMetrics
	MetricsErr string
	Events     []eventFact
	// Agent is the tail of the agent's log (nil: not read, LogErr says why).
	Agent     []logLine
	AgentTail int
	LogErr    string
	Now       time.Time
}

// gatewayFindings is the verdict on the gateway (first) and further findings.
func gatewayFindings(e gatewayEvidence) []finding {
	gw := e.Gateway
	ns := gw.Namespace
	var out []finding
	ready, cause := readiness(gw)
	switch {
	case !ready.Reported:
		out = append(out, finding{sevWarning, "NotReported", ready.Message,
			"is the operator running? (kubectl get pods -A -l app.kubernetes.io/name=bnerd-vpn-operator)"})
	case ready.Status != "True" && cause != nil:
		out = append(out, finding{sevError, "NotReady", fmt.Sprintf("not Ready: %s %s: %s", cause.Condition, cause.Reason, cause.Message),
			readyNext(gw, cause.Condition, cause.Reason)})
	case ready.Status != "True":
		out = append(out, finding{sevError, "NotReady", fmt.Sprintf("not Ready (%s): %s", ready.Reason, ready.Message), "see the gateway's conditions"})
	default:
		out = append(out, finding{sevOK, "Ready", "the gateway is Ready", ""})
	}
	if c := meta.FindStatusCondition(gw.Status.Conditions, vpnv1.ConditionReady); c != nil && gw.Status.ObservedGeneration < gw.Generation {
		out = append(out, finding{sevWarning, "StatusBehind",
			fmt.Sprintf("the status is of generation %d; the spec is at %d: the operator has not caught up", gw.Status.ObservedGeneration, gw.Generation),
			"wait, or see the operator's log"})
	}
	podCmd := fmt.Sprintf("kubectl -n %s describe pod -l %s=%s", ns, children.LabelGateway, gw.Name)
	switch {
	case e.Pod == nil:
		if cause == nil || cause.Condition != vpnv1.ConditionGatewayAvailable {
			out = append(out, finding{sevWarning, "NoPod", "no gateway pod: " + e.NoPod,
				fmt.Sprintf("kubectl -n %s describe deployment %s (the operator creates it once the gateway is rendered)", ns, children.Name(gw.Name))})
		}
	case e.Pod.DeletionTimestamp != nil || e.Pod.Status.Phase != corev1.PodRunning || !podReady(e.Pod):
		out = append(out, finding{sevWarning, "PodNotReady", fmt.Sprintf("gateway pod %s: %s", e.Pod.Name, podState(e.Pod)), podCmd})
	}
	if e.Pod != nil && e.Metrics == nil && e.MetricsErr != "" {
		out = append(out, finding{sevInfo, "MetricsUnreadable", "the agent's metrics could not be read (" + e.MetricsErr + "): drops, repairs and rejected configurations are unknown",
			"diagnose needs get on pods/proxy in the namespace, and the API server must reach the pod's metrics port"})
	}
	if e.Pod != nil && e.Agent == nil && e.LogErr != "" {
		out = append(out, finding{sevInfo, "LogsUnreadable", "the gateway pod's logs could not be read: " + e.LogErr,
			"diagnose needs get on pods/log in the namespace"})
	}
	lastEvent := func(reason string) string {
		for i := len(e.Events) - 1; i >= 0; i-- {
			if e.Events[i].Reason == reason {
				return fmt.Sprintf(" (last, %s ago: %s)", duration.HumanDuration(e.Now.Sub(e.Events[i].Time)), e.Events[i].Message)
			}
		}
		return ""
	}
	if m := e.Metrics; m != nil {
		if m.RulesetRepairs != nil && *m.RulesetRepairs > 0 {
			next := "something changes nftables in the pod's network namespace: check the node's CNI and anything else running there"
			if h := gw.Spec.Endpoint.HostNetwork; h != nil {
				next = fmt.Sprintf("something on node %s rewrites nftables (a `systemctl restart nftables`, a firewall manager): find it and keep it off the gateway's table", h.NodeName)
			}
			out = append(out, finding{sevWarning, "RulesetRepaired",
				fmt.Sprintf("the agent found the gateway's nftables table changed or missing and re-applied it %d times since it started%s", *m.RulesetRepairs, lastEvent("RulesetRepaired")), next})
		}
		if m.SpoofedDrops != nil && *m.SpoofedDrops > 0 {
			out = append(out, finding{sevWarning, "SpoofedTraffic",
				fmt.Sprintf("%d packets came through a peer's SA from a source outside that peer's subnets (another peer's or no peer's) and were dropped since the agent started", *m.SpoofedDrops),
				fmt.Sprintf("the counter names no peer: find the client that sends from addresses its VPNPeer does not list (kubectl -n %s get vpnpeers -o yaml, spec.ipsec.remoteSubnets); a LAN renumbered or NAT missing on the client, else a peer passing as another", ns)})
		}
		if m.ConfigRejected != nil && *m.ConfigRejected > 0 {
			cm := children.ConfigMapName(gw.Name)
			out = append(out, finding{sevWarning, "ConfigRejected",
				fmt.Sprintf("the agent refused %d configurations since it started; the last good one stays applied%s", *m.ConfigRejected, lastEvent("ConfigRejected")),
				fmt.Sprintf("ConfigMap %s must carry model.json alone, as the operator writes it: undo the hand edit (kubectl -n %s edit configmap %s)", cm, ns, cm)})
		}
	}
	if e.Agent != nil {
		entries, _ := parseAgent(e.Agent)
		var errs []agentEntry
		for _, en := range entries {
			if en.Level == "error" || en.Level == "dpanic" || en.Level == "panic" || en.Level == "fatal" {
				errs = append(errs, en)
			}
		}
		if len(errs) > 0 {
			last := errs[len(errs)-1]
			out = append(out, finding{sevInfo, "AgentErrors",
				fmt.Sprintf("the agent logged %s in its last %d lines (last, %s ago: %s)", plural(len(errs), "error"), e.AgentTail, duration.HumanDuration(e.Now.Sub(last.Time)), last),
				fmt.Sprintf("kubectl -n %s logs %s -c %s", ns, e.Pod.Name, children.ContainerAgent)})
		}
	}
	return sortFindings(out)
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
			return fmt.Sprintf("a service CIDR cannot change once assigned (the clients route it): restore spec.serviceCIDR to %s", orDash(gw.Status.ServiceCIDR))
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
