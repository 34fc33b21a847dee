// Package modelgen builds the model's objects (model.Gateway, model.Peer and its
// model.Decision) for the tests of the renderers, which take the model as model.Build leaves it
// and so write it by hand instead of building it from API objects:
//
//	modelgen.Peer("branch", modelgen.Authorized(), modelgen.IPsec("198.51.100.20", "branch.example.net"),
//		modelgen.SourceCIDRs("10.20.0.0/16"), modelgen.Grants("web"))
//
// It is a package of its own beside gen, which builds the API objects: the two sets of types
// share their names (Gateway, Peer, Exposure, UID), so each package's builders and modifiers
// keep the plain names, and a renderer's test imports the model's builders alone.
//
// Builders fill in only what every model object has (names, and a gateway's protocol and mode);
// modifiers, named for the field they set, apply in order. A modifier that sets a list sets it
// to the values given.
//
// Only tests import this package: hack/layout_test.go fails when a shipped binary links it.
package modelgen

import (
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// A GatewayMod changes a model.Gateway being built: a modifier of this package, a MetaMod,
// or a GatewayFunc for what none of them sets.
type GatewayMod interface {
	applyToGateway(*model.Gateway)
}

// A PeerMod changes a model.Peer being built: a modifier of this package, a MetaMod, or a
// PeerFunc.
type PeerMod interface {
	applyToPeer(*model.Peer)
}

// GatewayFunc is a GatewayMod written in place.
type GatewayFunc func(*model.Gateway)

// PeerFunc is a PeerMod written in place.
type PeerFunc func(*model.Peer)

func (f GatewayFunc) applyToGateway(g *model.Gateway) { f(g) }
func (f PeerFunc) applyToPeer(p *model.Peer)          { f(p) }

// MetaMod sets what a gateway and a peer carry of their object's metadata; both builders take
// it.
type MetaMod func(uid *types.UID, generation *int64)

func (m MetaMod) applyToGateway(g *model.Gateway) { m(&g.UID, &g.Generation) }
func (m MetaMod) applyToPeer(p *model.Peer)       { m(&p.UID, &p.Generation) }

// UID sets the object's UID.
func UID(uid types.UID) MetaMod {
	return func(u *types.UID, _ *int64) { *u = uid }
}

// Generation sets the object's generation.
func Generation(generation int64) MetaMod {
	return func(_ *types.UID, g *int64) { *g = generation }
}

// Prefixes parses CIDRs (a panic on a malformed one: they are the test's constants).
func Prefixes(cidrs ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(cidrs))
	for i, s := range cidrs {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// ---------------------------------------------------------------------------------------------
// Decisions: what the model decided about a peer.

// Allowed is an authorized peer's decision for reason (model.ReasonDefaultAllow or
// model.ReasonAuthorized), without a message.
func Allowed(reason string) model.Decision {
	return model.Decision{Authorized: true, Reason: reason}
}

// Dark is a refused peer's decision.
func Dark(reason, message string) model.Decision {
	return model.Decision{Reason: reason, Message: message}
}

// DefaultAllow: the one peer of a gateway, without an authorization block, reaches everything.
func DefaultAllow() model.Decision { return Allowed(model.ReasonDefaultAllow) }

// Authorized: the peer reaches what its authorization block names.
func Authorized() model.Decision { return Allowed(model.ReasonAuthorized) }

// NoGrants: a peer without an authorization block on a gateway of several peers, with the
// model's message.
func NoGrants() model.Decision {
	return Dark(model.ReasonNoGrants, model.MessageNoBlockMultiPeer)
}

// ---------------------------------------------------------------------------------------------
// Gateways.

// Gateway is an IPsec gateway in snat mode, changed by mods.
func Gateway(namespace, name string, mods ...GatewayMod) *model.Gateway {
	g := &model.Gateway{Namespace: namespace, Name: name, Protocol: model.ProtocolIPsec, Mode: model.ModeSNAT}
	for _, m := range mods {
		m.applyToGateway(g)
	}
	return g
}

// The endpoint modifiers set the endpoint to the one kind they name.

// FloatingIPPool: a floating IP allocated from pool.
func FloatingIPPool(pool string) GatewayFunc {
	return func(g *model.Gateway) {
		g.Endpoint = model.Endpoint{Kind: model.EndpointFloatingIPPool, FloatingIPPool: pool}
	}
}

// FloatingIP: the floating IP address.
func FloatingIP(address string) GatewayFunc {
	return func(g *model.Gateway) {
		g.Endpoint = model.Endpoint{Kind: model.EndpointFloatingIP, FloatingIP: netip.MustParseAddr(address)}
	}
}

// LoadBalancer: a Service of type LoadBalancer of class, with annotations.
func LoadBalancer(class string, annotations map[string]string) GatewayFunc {
	return func(g *model.Gateway) {
		g.Endpoint = model.Endpoint{Kind: model.EndpointLoadBalancer, LoadBalancerClass: class, Annotations: annotations}
	}
}

// HostNetwork: the network of node, on its address.
func HostNetwork(node, address string) GatewayFunc {
	return func(g *model.Gateway) {
		g.Endpoint = model.Endpoint{Kind: model.EndpointHostNetwork, NodeName: node, HostAddress: netip.MustParseAddr(address)}
	}
}

// PublicAddress sets the address peers connect to.
func PublicAddress(address string) GatewayFunc {
	return func(g *model.Gateway) { g.PublicAddress = address }
}

// ServiceCIDR sets the service CIDR and, as model.Build does, the gateway's local address:
// the CIDR's first host address.
func ServiceCIDR(cidr string) GatewayFunc {
	return func(g *model.Gateway) {
		g.ServiceCIDR = netip.MustParsePrefix(cidr)
		g.LocalAddress = g.ServiceCIDR.Addr().Next()
	}
}

// Exposures sets the gateway's exposures.
func Exposures(exposures ...model.Exposure) GatewayFunc {
	return func(g *model.Gateway) { g.Exposures = exposures }
}

// Peers sets the gateway's peers.
func Peers(peers ...model.Peer) GatewayFunc {
	return func(g *model.Gateway) { g.Peers = peers }
}

// The settings modifiers below set fields of the gateway's IPsec or WireGuard settings, and
// the protocol to the one the settings are for.

// IKE sets the IKE version and proposals.
func IKE(version int32, proposals ...string) GatewayFunc {
	return func(g *model.Gateway) {
		s := ipsecSettings(g)
		s.IKEVersion, s.IKEProposals = version, proposals
	}
}

// DPD sets dead peer detection's delay and action.
func DPD(delay time.Duration, action string) GatewayFunc {
	return func(g *model.Gateway) {
		s := ipsecSettings(g)
		s.DPDDelay, s.DPDAction = delay, action
	}
}

// IKELifetime sets the IKE SA's rekey and reauthentication times.
func IKELifetime(rekey, reauth time.Duration) GatewayFunc {
	return func(g *model.Gateway) {
		s := ipsecSettings(g)
		s.RekeyTime, s.ReauthTime = rekey, reauth
	}
}

// WireGuardDevice sets the gateway's WireGuard listen port and MTU.
func WireGuardDevice(listenPort uint16, mtu int32) GatewayFunc {
	return func(g *model.Gateway) {
		s := wireGuardSettings(g)
		s.ListenPort, s.MTU = listenPort, mtu
	}
}

// WireGuardPrivateKey sets where the gateway's WireGuard private key is: under key in the
// Secret secret.
func WireGuardPrivateKey(secret, key string) GatewayFunc {
	return func(g *model.Gateway) { wireGuardSettings(g).PrivateKey = model.SecretKeyRef{Name: secret, Key: key} }
}

func ipsecSettings(g *model.Gateway) *model.IPsecGateway {
	g.Protocol = model.ProtocolIPsec
	if g.IPsec == nil {
		g.IPsec = &model.IPsecGateway{}
	}
	return g.IPsec
}

func wireGuardSettings(g *model.Gateway) *model.WireGuardGateway {
	g.Protocol = model.ProtocolWireGuard
	if g.WireGuard == nil {
		g.WireGuard = &model.WireGuardGateway{}
	}
	return g.WireGuard
}

// ---------------------------------------------------------------------------------------------
// Peers.

// Peer is a peer named name with the model's decision d and nothing else: no protocol
// settings, no subnets, no grants; mods add them.
func Peer(name string, d model.Decision, mods ...PeerMod) model.Peer {
	p := model.Peer{Name: name, Authorization: d}
	for _, m := range mods {
		m.applyToPeer(&p)
	}
	return p
}

// SourceCIDRs sets the subnets the peer's tunnel carries.
func SourceCIDRs(cidrs ...string) PeerFunc {
	return func(p *model.Peer) { p.SourceCIDRs = Prefixes(cidrs...) }
}

// WithheldCIDRs sets the subnets the model keeps out of the peer's tunnel.
func WithheldCIDRs(cidrs ...string) PeerFunc {
	return func(p *model.Peer) { p.WithheldCIDRs = Prefixes(cidrs...) }
}

// Grants sets the exposures the peer reaches.
func Grants(exposures ...string) PeerFunc {
	return func(p *model.Peer) { p.Exposures = exposures }
}

// ReverseGrants sets the reverse exposures that reach into the peer.
func ReverseGrants(reverseExposures ...string) PeerFunc {
	return func(p *model.Peer) { p.ReverseExposures = reverseExposures }
}

// The protocol modifiers: IPsec and WireGuard give the peer the settings of their protocol
// (the other protocol's go); the modifiers of one field of the settings create them too.

// IPsec sets the remote device's address and IKE identity.
func IPsec(address, id string) PeerFunc {
	return func(p *model.Peer) {
		s := ipsecPeer(p)
		s.RemoteAddress, s.RemoteID = address, id
	}
}

// ESP sets the CHILD SA's proposals and rekey time.
func ESP(rekey time.Duration, proposals ...string) PeerFunc {
	return func(p *model.Peer) {
		s := ipsecPeer(p)
		s.RekeyTime, s.ESPProposals = rekey, proposals
	}
}

// PSK sets where the peer's pre-shared key is: under key in the Secret secret.
func PSK(secret, key string) PeerFunc {
	return func(p *model.Peer) { ipsecPeer(p).PSK = model.SecretKeyRef{Name: secret, Key: key} }
}

// Reqid sets the peer's reqid to the one model.PeerReqid gives it on the gateway
// namespace/gateway and, when it has several subnets (SourceCIDRs before it), their reqids
// (model.SubnetReqid).
func Reqid(namespace, gateway string) PeerFunc {
	return func(p *model.Peer) {
		ip := ipsecPeer(p)
		ip.Reqid = model.PeerReqid(namespace, gateway, p.Name)
		ip.SubnetReqids = nil
		if len(p.SourceCIDRs) > 1 {
			for _, s := range p.SourceCIDRs {
				ip.SubnetReqids = append(ip.SubnetReqids, model.SubnetReqid(namespace, gateway, p.Name, s))
			}
		}
	}
}

// WireGuard sets the peer's public key.
func WireGuard(publicKey string) PeerFunc {
	return func(p *model.Peer) { wireGuardPeer(p).PublicKey = publicKey }
}

func ipsecPeer(p *model.Peer) *model.IPsecPeer {
	if p.IPsec == nil {
		p.IPsec, p.WireGuard = &model.IPsecPeer{}, nil
	}
	return p.IPsec
}

func wireGuardPeer(p *model.Peer) *model.WireGuardPeer {
	if p.WireGuard == nil {
		p.WireGuard, p.IPsec = &model.WireGuardPeer{}, nil
	}
	return p.WireGuard
}
