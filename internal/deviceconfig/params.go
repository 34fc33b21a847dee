// Package deviceconfig writes the configuration of a client's VPN device (strongSwan,
// libreswan, wg-quick, FortiGate, pfSense, OPNsense, MikroTik, Cisco IOS-XE and ASA, Junos,
// PAN-OS) for one VPNPeer, matching exactly what the gateway renders for it, and reads the
// parameter sheets engineers collect back into VPNGateway/VPNPeer/Secret manifests. Every
// algorithm name goes through one table (algorithms.go); what a vendor cannot do is refused
// with the reason. It is pure: no I/O, and secrets appear only where the caller passes them.
package deviceconfig

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// Input is what a device configuration is made from.
type Input struct {
	// Gateway with its status (publicAddress, serviceCIDR, wireguardPublicKey).
	Gateway *vpnv1.VPNGateway
	// Peer is the client's VPNPeer.
	Peer *vpnv1.VPNPeer
	// PSK is the peer's pre-shared key (IPsec) or WireGuard preshared key; empty writes a
	// placeholder. Only ever set on an explicit request (--include-secrets).
	PSK string
}

// Params are the resolved values of one peer's tunnel, from the client's side.
type Params struct {
	Namespace, Gateway, Peer string
	Protocol                 model.Protocol

	// GatewayAddress is the gateway's public address: the client's remote gateway.
	GatewayAddress string
	// ServiceCIDR is the client's remote network (our view of the cluster).
	ServiceCIDR netip.Prefix
	// LocalNets are the client's local networks the gateway carries (its remote_ts).
	LocalNets []netip.Prefix
	// Withheld are networks the peer declared that the gateway does not carry, and why.
	Withheld       []netip.Prefix
	WithheldReason string

	IPsec     *IPsecParams
	WireGuard *WireGuardParams

	// PSK is the secret when the caller passed it; empty means a placeholder.
	PSK string

	// What only the parameter sheet export needs: the gateway's endpoint in sheet notation,
	// its spec'd local ID, WireGuard device settings as spec'd, and the peer's
	// authorization block (nil: none).
	Endpoint       string
	SpecLocalID    string
	SpecListenPort int32
	// SpecMTU is the spec's MTU (IPsec or WireGuard; 0 when not set).
	SpecMTU       int32
	Authorization *vpnv1.Authorization
}

// IPsecParams are the IKE and ESP settings, client's view.
type IPsecParams struct {
	IKEVersion int
	// IKE and ESP proposals, as the gateway has them (raw strings parsed).
	IKE, ESP []Proposal
	// GatewayID is the gateway's IKE identity (the client's remote ID); PeerID the client's own.
	GatewayID, PeerID string
	// PeerAddress is where the gateway expects the client (an address, a name or %any).
	PeerAddress string
	DPDDelay    time.Duration
	DPDAction   string
	// DPDTimeout is the gateway's IKEv1 dead peer timeout (0: charon's default).
	DPDTimeout time.Duration
	// IKELifetime is the gateway's IKE rekey time, ESPLifetime its CHILD SA rekey time.
	IKELifetime, ReauthTime, ESPLifetime time.Duration
	// PSKSecret names the Secret holding the key.
	PSKSecret model.SecretKeyRef
	// MTU is the gateway's tunnel MTU (its MSS clamp is MTU-40); ForceEncap: the gateway
	// UDP-encapsulates ESP even without a NAT.
	MTU        int
	ForceEncap bool
}

// WireGuardParams are the WireGuard settings, client's view.
type WireGuardParams struct {
	GatewayPublicKey string
	ListenPort       uint16
	MTU              int32
	// GatewayTunnelAddress is the gateway's own address in the service CIDR.
	GatewayTunnelAddress netip.Addr
	PeerPublicKey        string
	PeerEndpoint         string
	Keepalive            uint16
	// PresharedKeySecret is set when the peer uses a preshared key.
	PresharedKeySecret *model.SecretKeyRef
}

// Resolve validates the gateway and peer through the model (defaults applied exactly as the
// operator applies them) and returns the client's parameters.
func Resolve(in Input) (*Params, error) {
	gw, peer := in.Gateway, in.Peer
	if gw == nil || peer == nil {
		return nil, errors.New("a gateway and a peer are required")
	}
	if peer.Spec.GatewayRef != gw.Name || peer.Namespace != gw.Namespace {
		return nil, fmt.Errorf("peer %s/%s belongs to gateway %q, not %s/%s", peer.Namespace, peer.Name, peer.Spec.GatewayRef, gw.Namespace, gw.Name)
	}
	cidr := gw.Status.ServiceCIDR
	if cidr == "" {
		cidr = gw.Spec.ServiceCIDR
	}
	if cidr == "" {
		return nil, fmt.Errorf("gateway %s/%s has no service CIDR yet (status.serviceCIDR is empty): wait until the operator has allocated it", gw.Namespace, gw.Name)
	}
	sc, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, fmt.Errorf("gateway %s/%s: service CIDR %q: %v", gw.Namespace, gw.Name, cidr, err)
	}
	if gw.Status.PublicAddress == "" {
		return nil, fmt.Errorf("gateway %s/%s has no public address yet (status.publicAddress is empty): see its EndpointReady condition", gw.Namespace, gw.Name)
	}
	// Exposures do not shape the tunnel; leaving them out spares resolving Services.
	g := gw.DeepCopy()
	g.Spec.Exposures, g.Spec.ReverseExposures = nil, nil
	m, errs := model.Build(model.Input{
		Gateway:       g,
		Peers:         []vpnv1.VPNPeer{*peer},
		Config:        model.Config{PoolCIDR: model.DefaultPoolCIDR},
		ServiceCIDR:   sc,
		PublicAddress: gw.Status.PublicAddress,
	})
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return nil, fmt.Errorf("gateway %s/%s with peer %s is not valid: %s", gw.Namespace, gw.Name, peer.Name, strings.Join(msgs, "; "))
	}
	var mp *model.Peer
	for i := range m.Peers {
		if m.Peers[i].Name == peer.Name {
			mp = &m.Peers[i]
		}
	}
	if mp == nil {
		return nil, fmt.Errorf("peer %s not in the model", peer.Name)
	}
	if !mp.HasTunnel() {
		return nil, fmt.Errorf("peer %s/%s gets no tunnel from the gateway (%s: %s): fix that first", peer.Namespace, peer.Name, mp.Authorization.Reason, mp.Authorization.Message)
	}
	p := &Params{
		Namespace:      gw.Namespace,
		Gateway:        gw.Name,
		Peer:           peer.Name,
		Protocol:       m.Protocol,
		GatewayAddress: gw.Status.PublicAddress,
		ServiceCIDR:    m.ServiceCIDR,
		LocalNets:      mp.SourceCIDRs,
		Withheld:       mp.WithheldCIDRs,
		PSK:            in.PSK,
	}
	e := gw.Spec.Endpoint
	switch {
	case e.LoadBalancer != nil:
		p.Endpoint = "loadBalancer"
		if e.LoadBalancer.LoadBalancerClass != "" {
			p.Endpoint += ":" + e.LoadBalancer.LoadBalancerClass
		}
	case e.FloatingIPPool != "":
		p.Endpoint = "floatingIPPool:" + e.FloatingIPPool
	case e.FloatingIP != "":
		p.Endpoint = "floatingIP:" + e.FloatingIP
	case e.HostNetwork != nil:
		p.Endpoint = "hostNetwork:" + hostNodes(e.HostNetwork)
		if e.HostNetwork.Address != "" {
			p.Endpoint += "@" + e.HostNetwork.Address
		}
	}
	if gw.Spec.IPsec != nil {
		p.SpecLocalID, p.SpecMTU = gw.Spec.IPsec.LocalID, gw.Spec.IPsec.MTU
	}
	if gw.Spec.WireGuard != nil {
		p.SpecListenPort, p.SpecMTU = gw.Spec.WireGuard.ListenPort, gw.Spec.WireGuard.MTU
	}
	if peer.Spec.Authorization != nil {
		p.Authorization = peer.Spec.Authorization.DeepCopy()
	}
	if len(mp.WithheldCIDRs) > 0 {
		p.WithheldReason = mp.Authorization.Message
	}
	switch m.Protocol {
	case model.ProtocolIPsec:
		if mp.IPsec == nil {
			return nil, fmt.Errorf("peer %s has no ipsec section but gateway %s is an ipsec gateway", peer.Name, gw.Name)
		}
		// the peer's own IKE settings, or the gateway's
		ike, ikeField := m.IPsec.IKEFor(mp.IPsec), "spec.ipsec.ike"
		if mp.IPsec.IKE != nil {
			ikeField = "peer spec.ipsec.ike"
		}
		ip := &IPsecParams{
			IKEVersion:  int(ike.IKEVersion),
			GatewayID:   model.GatewayLocalID(gw, gw.Status.PublicAddress),
			PeerID:      mp.IPsec.RemoteID,
			PeerAddress: mp.IPsec.RemoteAddress,
			DPDDelay:    ike.DPDDelay,
			DPDAction:   ike.DPDAction,
			DPDTimeout:  ike.DPDTimeout,
			IKELifetime: ike.RekeyTime,
			ReauthTime:  ike.ReauthTime,
			ESPLifetime: mp.IPsec.RekeyTime,
			PSKSecret:   mp.IPsec.PSK,
			MTU:         m.IPsec.MTU(),
			ForceEncap:  m.IPsec.ForceEncap,
		}
		for i, s := range ike.IKEProposals {
			pr, err := ParseProposal(IKE, s)
			if err != nil {
				return nil, fmt.Errorf("%s.proposals[%d]: %w", ikeField, i, err)
			}
			if ip.IKEVersion == 1 && pr.AEAD() {
				return nil, fmt.Errorf("%s.proposals[%d]: %q: AEAD encryption is not available for an IKEv1 SA", ikeField, i, s)
			}
			ip.IKE = append(ip.IKE, pr)
		}
		for i, s := range mp.IPsec.ESPProposals {
			pr, err := ParseProposal(ESP, s)
			if err != nil {
				return nil, fmt.Errorf("peer spec.ipsec.esp.proposals[%d]: %w", i, err)
			}
			ip.ESP = append(ip.ESP, pr)
		}
		p.IPsec = ip
	case model.ProtocolWireGuard:
		if mp.WireGuard == nil {
			return nil, fmt.Errorf("peer %s has no wireguard section but gateway %s is a wireguard gateway", peer.Name, gw.Name)
		}
		if gw.Status.WireGuardPublicKey == "" {
			return nil, fmt.Errorf("gateway %s/%s has no WireGuard public key yet (status.wireguardPublicKey is empty): see its KeyReady condition", gw.Namespace, gw.Name)
		}
		p.WireGuard = &WireGuardParams{
			GatewayPublicKey:     gw.Status.WireGuardPublicKey,
			ListenPort:           m.WireGuard.ListenPort,
			MTU:                  m.WireGuard.MTU,
			GatewayTunnelAddress: m.LocalAddress,
			PeerPublicKey:        mp.WireGuard.PublicKey,
			PeerEndpoint:         mp.WireGuard.Endpoint,
			Keepalive:            mp.WireGuard.PersistentKeepalive,
			PresharedKeySecret:   mp.WireGuard.PresharedKey,
		}
	}
	return p, nil
}

// EffectiveIKE is a gateway's IKE settings with the operator's defaults applied (for comparing
// a sheet with an existing gateway: leaving a setting out means its default).
func EffectiveIKE(s *vpnv1.IPsecGatewaySettings) (*model.IPsecGateway, error) {
	gw := &vpnv1.VPNGateway{}
	gw.Name, gw.Namespace = "probe", "probe"
	gw.Spec = vpnv1.VPNGatewaySpec{
		Protocol: vpnv1.ProtocolIPsec,
		Endpoint: vpnv1.Endpoint{LoadBalancer: &vpnv1.LoadBalancerEndpoint{}},
		IPsec:    s,
	}
	m, errs := model.Build(model.Input{Gateway: gw, Config: model.Config{PoolCIDR: model.DefaultPoolCIDR},
		ServiceCIDR: netip.MustParsePrefix("100.64.0.0/24")})
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", errs[0].Error())
	}
	return m.IPsec, nil
}

// hostNodes is a host-network endpoint's node, or its nodes joined by commas (a gateway with
// a standby).
func hostNodes(hn *vpnv1.HostNetworkEndpoint) string {
	if len(hn.Nodes) > 0 {
		return strings.Join(hn.Nodes, ",")
	}
	return hn.NodeName
}
