package deviceconfig

import (
	"strings"

	"sigs.k8s.io/yaml"
)

// SheetOf is the parameter sheet describing the peer's tunnel, with the gateway's resolved
// settings written out (the operator's defaults included): importing it yields the same
// tunnel. The PSK is in it only when p carries it.
func SheetOf(p *Params) *Sheet {
	s := &Sheet{
		Gateway: SheetGateway{
			Name:          p.Gateway,
			Namespace:     p.Namespace,
			Endpoint:      p.Endpoint,
			ServiceCIDR:   p.ServiceCIDR.String(),
			PublicAddress: p.GatewayAddress,
		},
		Peer: SheetPeer{
			Name:     p.Peer,
			Networks: prefixesOf(p.LocalNets),
		},
		PSK: p.PSK,
	}
	if a := p.Authorization; a != nil {
		s.Peer.Exposures = a.Exposures
		s.Peer.ReverseExposures = a.ReverseExposures
	}
	if ip := p.IPsec; ip != nil {
		s.Gateway.Protocol = "ipsec"
		s.Gateway.LocalID = p.SpecLocalID
		s.Gateway.MTU, s.Gateway.ForceEncapsulation = p.SpecMTU, ip.ForceEncap
		s.Peer.Address = ip.PeerAddress
		s.Peer.ID = ip.PeerID
		s.Peer.PSKSecret = ip.PSKSecret.Name + "/" + ip.PSKSecret.Key
		ike := &SheetIKE{
			Version:        ip.IKEVersion,
			Authentication: "psk",
			Lifetime:       swanDuration(ip.IKELifetime),
			DPD:            &SheetDPD{Delay: swanDuration(ip.DPDDelay), Action: ip.DPDAction},
		}
		if ip.ReauthTime > 0 {
			ike.ReauthTime = swanDuration(ip.ReauthTime)
		}
		if ip.DPDTimeout > 0 {
			ike.DPD.Timeout = swanDuration(ip.DPDTimeout)
		}
		for _, pr := range ip.IKE {
			ike.Proposals = append(ike.Proposals, sheetProposal(IKE, pr))
		}
		esp := &SheetESP{Lifetime: swanDuration(ip.ESPLifetime)}
		for _, pr := range ip.ESP {
			esp.Proposals = append(esp.Proposals, sheetProposal(ESP, pr))
		}
		s.IKE, s.ESP = ike, esp
	}
	if w := p.WireGuard; w != nil {
		s.Gateway.Protocol = "wireguard"
		s.Gateway.ListenPort, s.Gateway.MTU = p.SpecListenPort, p.SpecMTU
		s.WireGuard = &SheetWireGuard{PublicKey: w.PeerPublicKey, Endpoint: w.PeerEndpoint, PresharedKey: w.PresharedKeySecret != nil}
		if w.Keepalive > 0 {
			k := int32(w.Keepalive)
			s.WireGuard.PersistentKeepalive = &k
		}
		if w.PresharedKeySecret != nil {
			s.Peer.PSKSecret = w.PresharedKeySecret.Name + "/" + w.PresharedKeySecret.Key
		}
	}
	return s
}

func sheetProposal(ctx Context, p Proposal) SheetProposal {
	names := func(as []*Algorithm) StringList {
		var out StringList
		for _, a := range as {
			out = append(out, a.Name)
		}
		return out
	}
	sp := SheetProposal{Encryption: names(p.Enc), Integrity: names(p.Integ), DHGroups: names(p.DH)}
	if ctx == IKE {
		sp.PRF = names(p.PRF)
	}
	return sp
}

func renderSheet(p *Params) (string, error) {
	// sections in the order engineers read them (keys inside each are sorted)
	s := SheetOf(p)
	var b []byte
	for _, sec := range []struct {
		key string
		v   any
		set bool
	}{
		{"gateway", s.Gateway, true}, {"peer", s.Peer, true}, {"ike", s.IKE, s.IKE != nil},
		{"esp", s.ESP, s.ESP != nil}, {"wireguard", s.WireGuard, s.WireGuard != nil}, {"psk", s.PSK, s.PSK != ""},
	} {
		if !sec.set {
			continue
		}
		y, err := yaml.Marshal(map[string]any{sec.key: sec.v})
		if err != nil {
			return "", err
		}
		b = append(b, y...)
	}
	d := &doc{comment: "# "}
	d.c("Parameter sheet of VPNPeer %s/%s (gateway %s/%s), written by kubectl-vpn peer-config --format sheet.", p.Namespace, p.Peer, p.Namespace, p.Gateway)
	d.c("Algorithms are strongSwan keywords; kubectl vpn import also reads vendor words (AES256-GCM-16, SHA2-256, group 19).")
	if p.PSK == "" && (p.IPsec != nil || (p.WireGuard != nil && p.WireGuard.PresharedKeySecret != nil)) {
		d.c("The key is not included (peer.pskSecret names its Secret); --include-secrets adds it as psk.")
	}
	d.l("%s", strings.TrimRight(string(b), "\n"))
	return d.String(), nil
}
