package deviceconfig

import (
	"fmt"
	"slices"
	"strings"

	"github.com/bnerd/bnerd-vpn-operator/internal/render/strongswan/swanconf"
)

// proposalStrings writes proposals in strongSwan notation.
func proposalStrings(ctx Context, ps []Proposal) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String(ctx)
	}
	return out
}

// children splits the client's local networks the way the gateway splits its remote_ts: one
// CHILD_SA per network with IKEv1 (which carries one selector pair) and with a gateway that
// starts its children itself (one per subnet, each with a reqid of its own), one for all for a
// gateway that waits for a site at %any.
func childSets(p *Params) [][]string {
	nets := strings.Split(joinPrefixes(p.LocalNets, ","), ",")
	if len(nets) > 1 && (p.IPsec.IKEVersion == 1 || p.IPsec.PeerAddress != "%any") {
		out := make([][]string, len(nets))
		for i, n := range nets {
			out[i] = []string{n}
		}
		return out
	}
	return [][]string{nets}
}

// renderStrongSwan writes the client's swanctl.conf: the mirror of the gateway's connection
// (internal/render/strongswan): same proposals, IDs swapped, local_ts = the client's networks,
// remote_ts = our service CIDR, same DPD delay and rekey times. The client always initiates
// and re-initiates (start, dpd_action and close_action restart/start).
func renderStrongSwan(p *Params) (string, error) {
	ip := p.IPsec
	name := objectName(p, 64)
	if err := swanconf.CheckName(name); err != nil {
		return "", err
	}
	q := func(field, v string) (string, error) {
		s, err := swanconf.Quote(v)
		if err != nil {
			return "", fmt.Errorf("%s: %w", field, err)
		}
		return s, nil
	}
	localID, err := q("peer ID", ip.PeerID)
	if err != nil {
		return "", err
	}
	remoteID, err := q("gateway ID", ip.GatewayID)
	if err != nil {
		return "", err
	}
	secret, err := q("pre-shared key", psk(p))
	if err != nil {
		return "", err
	}
	d := &doc{comment: "# "}
	header(d, p, "strongswan")
	childrenNote(d, p, "child")
	d.c("Load with: swanctl --load-all (file in /etc/swanctl/conf.d/ or swanctl.conf).")
	d.blank()
	d.l("connections {")
	d.l("    %s {", name)
	d.l("        version = %d", ip.IKEVersion)
	d.l("        # local_addrs = %s    # optional: your uplink address", phOutsideIP)
	d.l("        remote_addrs = %s", p.GatewayAddress)
	d.l("        proposals = %s", strings.Join(proposalStrings(IKE, ip.IKE), ", "))
	d.l("        mobike = no")
	if ip.ForceEncap {
		d.l("        encap = yes")
	}
	d.l("        dpd_delay = %s", swanDuration(dpdDelay(p)))
	if ip.DPDTimeout > 0 {
		d.l("        dpd_timeout = %s", swanDuration(ip.DPDTimeout)) // IKEv1: the gateway's
	}
	d.l("        rekey_time = %s", swanDuration(ip.IKELifetime))
	if ip.ReauthTime > 0 {
		d.l("        reauth_time = %s", swanDuration(ip.ReauthTime))
	}
	d.l("        keyingtries = 0")
	d.l("        local {")
	d.l("            auth = psk")
	d.l("            id = %s", localID)
	d.l("        }")
	d.l("        remote {")
	d.l("            auth = psk")
	d.l("            id = %s", remoteID)
	d.l("        }")
	d.l("        children {")
	sets := childSets(p)
	for i, ts := range sets {
		child := name
		if len(sets) > 1 {
			child = fmt.Sprintf("%s-%d", name, i+1)
		}
		d.l("            %s {", child)
		d.l("                mode = tunnel")
		d.l("                local_ts = %s", strings.Join(ts, ", "))
		d.l("                remote_ts = %s", p.ServiceCIDR)
		d.l("                esp_proposals = %s", strings.Join(proposalStrings(ESP, ip.ESP), ", "))
		d.l("                rekey_time = %s", swanDuration(ip.ESPLifetime))
		d.l("                start_action = start")
		d.l("                dpd_action = restart")
		d.l("                close_action = start")
		d.l("            }")
	}
	d.l("        }")
	d.l("    }")
	d.l("}")
	d.blank()
	d.l("secrets {")
	d.l("    ike-%s {", name)
	d.l("        id-1 = %s", localID)
	d.l("        id-2 = %s", remoteID)
	d.l("        secret = %s", secret)
	d.l("    }")
	d.l("}")
	return d.String(), nil
}

// libreswanID writes an identity as libreswan reads it: addresses as they are, FQDNs with
// '@' (no DNS lookup), emails as they are, DNs quoted.
func libreswanID(id string) (string, error) {
	k, v := classifyID(id)
	switch k {
	case idAddress, idEmail:
		return v, nil
	case idFQDN:
		return "@" + v, nil
	case idDN:
		return `"` + v + `"`, nil
	}
	return "", fmt.Errorf("libreswan: identity %q (%s) cannot be written", id, k)
}

// libreswanProposal joins one proposal's algorithms: ENC-INTEG|PRF-DH, several of a kind
// joined by '+'.
func libreswanProposal(ctx Context, v vproposal) string {
	parts := []string{strings.Join(v.Enc, "+")}
	switch {
	case ctx == IKE && v.P.AEAD():
		parts = append(parts, strings.Join(v.PRF, "+"))
	case ctx == IKE:
		parts = append(parts, strings.Join(v.Integ, "+"))
	case !v.P.AEAD():
		parts = append(parts, strings.Join(v.Integ, "+"))
	case len(v.DH) > 0:
		parts = append(parts, "null")
	}
	if len(v.DH) > 0 {
		parts = append(parts, strings.Join(v.DH, "+"))
	}
	return strings.Join(parts, "-")
}

// renderLibreswan writes an ipsec.conf conn for libreswan 4.x, IKEv2 or IKEv1 (main mode).
func renderLibreswan(p *Params) (string, error) {
	ip := p.IPsec
	if err := checkPSK(p, vLibreswan); err != nil {
		return "", err
	}
	ike, skIKE, err := translate(vLibreswan, IKE, ip.IKE, func(v vproposal) error {
		if !v.P.AEAD() && !v.P.prfImplied() {
			return fmt.Errorf("libreswan derives the PRF from the integrity algorithm; %s names another", v.P.Raw)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	esp, skESP, err := translate(vLibreswan, ESP, ip.ESP, nil)
	if err != nil {
		return "", err
	}
	left, err := libreswanID(ip.PeerID)
	if err != nil {
		return "", err
	}
	right, err := libreswanID(ip.GatewayID)
	if err != nil {
		return "", err
	}
	esp, groups, skPFS := onePFS(esp)
	skESP = append(skESP, skPFS...)
	esp, skPFS, err = libreswanPFS(esp, groups, ip.IKEVersion == 1)
	if err != nil {
		return "", err
	}
	skESP = append(skESP, skPFS...)
	name := objectName(p, 64)
	d := &doc{comment: "# "}
	header(d, p, "libreswan")
	if len(p.LocalNets) == 1 {
		childrenNote(d, p, "leftsubnet")
	} else {
		childrenNote(d, p, "leftsubnets entry")
	}
	d.c("Put this conn in /etc/ipsec.d/%s.conf and the key line in /etc/ipsec.d/%s.secrets;", name, name)
	d.c("check with: ipsec addconn --checkconfig --config /etc/ipsec.d/%s.conf", name)
	if ip.IKEVersion == 1 {
		d.c("IKEv1: libreswan 4.x drops IKEv1 unless ipsec.conf's config setup has ikev1-policy=accept.")
	}
	skippedNote(d, IKE, skIKE)
	skippedNote(d, ESP, skESP)
	d.blank()
	d.l("conn %s", name)
	if ip.IKEVersion == 1 {
		d.l("\tikev2=no") // IKEv1, main mode
	} else {
		d.l("\tikev2=insist")
	}
	d.l("\tauthby=secret")
	d.l("\tleft=%%defaultroute")
	d.l("\tleftid=%s", left)
	if len(p.LocalNets) == 1 {
		d.l("\tleftsubnet=%s", p.LocalNets[0])
	} else {
		d.l("\tleftsubnets={%s}", joinPrefixes(p.LocalNets, " "))
	}
	d.l("\tright=%s", p.GatewayAddress)
	d.l("\trightid=%s", right)
	d.l("\trightsubnet=%s", p.ServiceCIDR)
	var ikes, esps []string
	for _, v := range ike {
		ikes = append(ikes, libreswanProposal(IKE, v))
	}
	for _, v := range esp {
		esps = append(esps, libreswanProposal(ESP, v))
	}
	d.l("\tike=%s", strings.Join(ikes, ","))
	d.l("\tesp=%s", strings.Join(esps, ","))
	if len(groups) > 0 {
		d.l("\tpfs=yes")
	} else {
		d.l("\tpfs=no")
	}
	d.l("\tikelifetime=%ss", seconds(ip.IKELifetime))
	d.l("\tsalifetime=%ss", seconds(ip.ESPLifetime))
	d.l("\tdpddelay=%s", seconds(dpdDelay(p)))
	if ip.IKEVersion == 1 {
		timeout := dpdDelay(p) * dpdRetries
		if ip.DPDTimeout > 0 {
			timeout = ip.DPDTimeout // the gateway's
		}
		d.l("\tdpdtimeout=%s", seconds(timeout)) // IKEv2 retransmits instead
	}
	d.l("\tdpdaction=restart")
	d.l("\tmobike=no")
	if p.IPsec.ForceEncap {
		d.l("\tencapsulation=yes")
	}
	d.l("\tauto=start")
	d.blank()
	d.c("/etc/ipsec.d/%s.secrets:", name)
	d.l("# %s %s : PSK \"%s\"", left, right, psk(p))
	return d.String(), nil
}

// libreswanPFS keeps the ESP proposals with one PFS group, each reduced to it: libreswan 4
// refuses a conn whose ESP proposals name several DH groups (it does not implement INVALID_KE
// for a CHILD_SA), and offers only MODP groups for IKEv1's phase 2. The group is the first of
// the gateway's that libreswan can use there.
func libreswanPFS(vps []vproposal, groups []string, ikev1 bool) (kept []vproposal, left []string, err error) {
	var usable []string
	for _, g := range groups {
		if !ikev1 || strings.HasPrefix(g, "modp") {
			usable = append(usable, g)
		}
	}
	if len(groups) == 0 {
		return vps, nil, nil
	}
	if len(usable) == 0 {
		return nil, nil, fmt.Errorf("libreswan: the gateway's ESP proposals use PFS groups %s, and libreswan offers only MODP groups for IKEv1's phase 2", strings.Join(groups, ", "))
	}
	g := usable[0]
	for _, v := range vps {
		if !slices.Contains(v.DH, g) {
			left = append(left, fmt.Sprintf("%s: libreswan proposes one PFS group for all ESP proposals, %s here", v.P.String(ESP), g))
			continue
		}
		v.DH = []string{g}
		kept = append(kept, v)
	}
	return kept, left, nil
}

// renderWGQuick writes a wg-quick configuration: our service CIDR is the only allowed IPs, our
// public address and port the endpoint.
func renderWGQuick(p *Params) (string, error) {
	w := p.WireGuard
	d := &doc{comment: "# "}
	header(d, p, "wg-quick")
	d.c("Your device's public key must be %s (the VPNPeer's spec.wireguard.publicKey):", w.PeerPublicKey)
	d.c("use the private key that belongs to it. Address: your device's own address inside your local")
	d.c("networks (%s): the gateway accepts only those as source addresses.", joinPrefixes(p.LocalNets, ", "))
	d.c("MTU %d is the gateway's; clamp TCP MSS to %d on your router if hosts behind it use the tunnel.", w.MTU, w.MTU-40)
	d.blank()
	d.l("[Interface]")
	d.l("PrivateKey = %s", phPrivateKey)
	d.l("Address = %s", phWGAddress)
	d.l("MTU = %d", w.MTU)
	if w.PeerEndpoint != "" {
		if i := strings.LastIndexByte(w.PeerEndpoint, ':'); i > 0 {
			d.l("ListenPort = %s", w.PeerEndpoint[i+1:])
		}
	}
	d.blank()
	d.l("[Peer]")
	d.c("VPNGateway %s/%s", p.Namespace, p.Gateway)
	d.l("PublicKey = %s", w.GatewayPublicKey)
	if w.PresharedKeySecret != nil {
		if p.PSK != "" {
			d.l("PresharedKey = %s", p.PSK)
		} else {
			d.l("PresharedKey = %s", phPSK)
		}
	}
	d.l("Endpoint = %s:%d", p.GatewayAddress, w.ListenPort)
	d.l("AllowedIPs = %s", p.ServiceCIDR)
	keep := w.Keepalive
	if keep == 0 {
		keep = 25
	}
	d.l("PersistentKeepalive = %d", keep)
	return d.String(), nil
}
