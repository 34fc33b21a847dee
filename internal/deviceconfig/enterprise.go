package deviceconfig

import (
	"fmt"
	"strings"
	"time"
)

// Placeholders of the enterprise templates: numbers only the device knows are free.
const (
	phTunnelNumber = "{{TUNNEL_NUMBER}}"
	phPolicyPrio   = "{{IKEV2_POLICY_PRIORITY_%d}}"
	phMapSeq       = "{{CRYPTO_MAP_SEQUENCE}}"
)

// ciscoIOSID writes an IKEv2 identity for "identity local" and "match identity remote".
func ciscoIOSID(id string, remote bool) (string, error) {
	k, v := classifyID(id)
	switch k {
	case idAddress:
		if remote {
			return "address " + v + " 255.255.255.255", nil
		}
		return "address " + v, nil
	case idFQDN:
		return "fqdn " + v, nil
	case idEmail:
		return "email " + v, nil
	case idKeyID:
		return "key-id " + v, nil
	}
	return "", fmt.Errorf("Cisco IOS-XE cannot use a %s (%q) as IKEv2 identity with a pre-shared key", k, id)
}

// renderCiscoIOS writes an IKEv2 static VTI. A VTI negotiates 0.0.0.0/0 selectors by
// default, which the gateway (whose selectors are our service CIDR and your networks) narrows
// and IOS refuses; the IPsec policy ACL makes the VTI propose exactly the gateway's selectors.
func renderCiscoIOS(p *Params) (string, error) {
	ip := p.IPsec
	if err := checkPSK(p, vCiscoIOS); err != nil {
		return "", err
	}
	if err := ikeV2Only(p, vCiscoIOS); err != nil {
		return "", err
	}
	ike, skIKE, err := translate(vCiscoIOS, IKE, ip.IKE, nil)
	if err != nil {
		return "", err
	}
	esp, skESP, err := translate(vCiscoIOS, ESP, ip.ESP, nil)
	if err != nil {
		return "", err
	}
	esp, pfs, skPFS := onePFS(esp)
	skESP = append(skESP, skPFS...)
	local, err := ciscoIOSID(ip.PeerID, false)
	if err != nil {
		return "", err
	}
	remote, err := ciscoIOSID(ip.GatewayID, true)
	if err != nil {
		return "", err
	}
	name := strings.ToUpper(objectName(p, 40))
	d := &doc{comment: "! "}
	header(d, p, "cisco-ios")
	skippedNote(d, IKE, skIKE)
	skippedNote(d, ESP, skESP)
	if len(pfs) > 1 {
		d.c("IOS takes one PFS group per IPsec profile: %s (the gateway also accepts %s).", pfs[0], strings.Join(pfs[1:], ", "))
	}
	d.c("The VTI proposes the traffic selectors of ACL %s-TS (IOS-XE 16.12+): a VTI's default", name)
	d.c("0.0.0.0/0 selectors are narrowed by the gateway, which IOS does not accept.")
	d.blank()
	var props []string
	for i, v := range ike {
		pn := fmt.Sprintf("%s-%d", name, i+1)
		props = append(props, pn)
		d.l("crypto ikev2 proposal %s", pn)
		d.l(" encryption %s", strings.Join(v.Enc, " "))
		if len(v.Integ) > 0 {
			d.l(" integrity %s", strings.Join(v.Integ, " "))
		}
		d.l(" prf %s", strings.Join(v.PRF, " "))
		d.l(" group %s", strings.Join(v.DH, " "))
	}
	d.l("crypto ikev2 policy %s", name)
	d.l(" match address local %s", phOutsideIP)
	for _, pn := range props {
		d.l(" proposal %s", pn)
	}
	d.l("crypto ikev2 keyring %s", name)
	d.l(" peer %s", name)
	d.l("  address %s", p.GatewayAddress)
	d.l("  pre-shared-key %s", psk(p))
	d.l("crypto ikev2 profile %s", name)
	d.l(" match identity remote %s", remote)
	d.l(" identity local %s", local)
	d.l(" authentication remote pre-share")
	d.l(" authentication local pre-share")
	d.l(" keyring local %s", name)
	d.l(" lifetime %s", seconds(ip.IKELifetime))
	d.l(" dpd %s %d periodic", seconds(dpdDelay(p)), dpdRetries)
	var sets []string
	for _, v := range esp {
		for _, e := range v.Enc {
			tx := []string{e}
			if !v.P.AEAD() {
				for _, i := range v.Integ {
					sets = append(sets, "")
					tn := fmt.Sprintf("%s-%d", name, len(sets))
					sets[len(sets)-1] = tn
					d.l("crypto ipsec transform-set %s %s %s", tn, e, i)
					d.l(" mode tunnel")
				}
				continue
			}
			sets = append(sets, fmt.Sprintf("%s-%d", name, len(sets)+1))
			d.l("crypto ipsec transform-set %s %s", sets[len(sets)-1], strings.Join(tx, " "))
			d.l(" mode tunnel")
		}
	}
	d.l("crypto ipsec profile %s", name)
	d.l(" set transform-set %s", strings.Join(sets, " "))
	if len(pfs) > 0 {
		d.l(" set pfs group%s", pfs[0])
	}
	d.l(" set security-association lifetime seconds %s", seconds(ip.ESPLifetime))
	d.l(" set ikev2-profile %s", name)
	d.l("ip access-list extended %s-TS", name)
	for _, n := range p.LocalNets {
		d.l(" permit ip %s %s %s %s", n.Addr(), wildcard(n), p.ServiceCIDR.Addr(), wildcard(p.ServiceCIDR))
	}
	d.l("interface Tunnel%s", phTunnelNumber)
	d.l(" description VPNPeer %s/%s", p.Namespace, p.Peer)
	d.l(" ip unnumbered %s", phOutsideIf)
	d.l(" ip mtu %d", p.IPsec.MTU)
	d.l(" ip tcp adjust-mss %d", p.IPsec.MTU-40)
	d.l(" tunnel source %s", phOutsideIf)
	d.l(" tunnel mode ipsec ipv4")
	d.l(" tunnel destination %s", p.GatewayAddress)
	d.l(" tunnel protection ipsec policy ipv4 %s-TS", name)
	d.l(" tunnel protection ipsec profile %s", name)
	d.l("ip route %s %s Tunnel%s", p.ServiceCIDR.Addr(), netmask(p.ServiceCIDR), phTunnelNumber)
	return d.String(), nil
}

// renderCiscoASA writes a policy-based IKEv2 tunnel: IKEv2 policies, an IPsec proposal, the
// crypto ACL, NAT exemption, a crypto map entry and the tunnel group.
func renderCiscoASA(p *Params) (string, error) {
	ip := p.IPsec
	if err := checkPSK(p, vCiscoASA); err != nil {
		return "", err
	}
	if err := ikeV2Only(p, vCiscoASA); err != nil {
		return "", err
	}
	ike, skIKE, err := translate(vCiscoASA, IKE, ip.IKE, nil)
	if err != nil {
		return "", err
	}
	esp, skESP, err := translate(vCiscoASA, ESP, ip.ESP, nil)
	if err != nil {
		return "", err
	}
	esp, pfs, skPFS := onePFS(esp)
	skESP = append(skESP, skPFS...)
	lk, lv := classifyID(ip.PeerID)
	name := strings.ToUpper(objectName(p, 40))
	d := &doc{comment: "! "}
	header(d, p, "cisco-asa")
	skippedNote(d, IKE, skIKE)
	skippedNote(d, ESP, skESP)
	if len(pfs) > 1 {
		d.c("The crypto map takes one PFS group: %s (the gateway also accepts %s).", pfs[0], strings.Join(pfs[1:], ", "))
	}
	switch lk {
	case idAddress:
		d.c("The gateway expects your IKE identity to be your address %s: keep crypto isakmp identity auto or address (global).", lv)
	case idFQDN:
		host, domain, _ := strings.Cut(lv, ".")
		d.c("The gateway expects your IKE identity to be the FQDN %s: this ASA's identity is global;", lv)
		d.c("use crypto isakmp identity hostname with hostname %s and domain-name %s.", host, domain)
	default:
		return "", fmt.Errorf("Cisco ASA cannot present a %s (%q) as IKE identity for a site-to-site tunnel with a pre-shared key", lk, ip.PeerID)
	}
	d.c("IKEv2 policies are global; use priorities not yet taken ({{IKEV2_POLICY_PRIORITY_n}}),")
	d.c("and the crypto map already bound to %s if there is one (one per interface).", phOutsideIf)
	d.blank()
	for i, v := range ike {
		d.l("crypto ikev2 policy "+phPolicyPrio, i+1)
		d.l(" encryption %s", strings.Join(v.Enc, " "))
		if len(v.Integ) > 0 {
			d.l(" integrity %s", strings.Join(v.Integ, " "))
		} else {
			d.l(" integrity null")
		}
		d.l(" group %s", strings.Join(v.DH, " "))
		d.l(" prf %s", strings.Join(v.PRF, " "))
		d.l(" lifetime seconds %s", seconds(ip.IKELifetime))
	}
	d.l("crypto ikev2 enable %s", phOutsideIf)
	d.l("crypto ipsec ikev2 ipsec-proposal %s", name)
	d.l(" protocol esp encryption %s", strings.Join(union(esp, encOf), " "))
	integ := union(esp, integOf)
	for _, v := range esp {
		if v.P.AEAD() {
			integ = appendStr(integ, "null")
		}
	}
	d.l(" protocol esp integrity %s", strings.Join(integ, " "))
	d.l("object-group network %s-LOCAL", name)
	for _, n := range p.LocalNets {
		d.l(" network-object %s %s", n.Addr(), netmask(n))
	}
	d.l("object-group network %s-REMOTE", name)
	d.l(" network-object %s %s", p.ServiceCIDR.Addr(), netmask(p.ServiceCIDR))
	d.l("access-list %s extended permit ip object-group %s-LOCAL object-group %s-REMOTE", name, name, name)
	d.l("nat (%s,%s) source static %s-LOCAL %s-LOCAL destination static %s-REMOTE %s-REMOTE no-proxy-arp route-lookup",
		phInsideIf, phOutsideIf, name, name, name, name)
	m := phCryptoMap + " " + phMapSeq
	d.l("crypto map %s match address %s", m, name)
	d.l("crypto map %s set peer %s", m, p.GatewayAddress)
	d.l("crypto map %s set ikev2 ipsec-proposal %s", m, name)
	if len(pfs) > 0 {
		d.l("crypto map %s set pfs group%s", m, pfs[0])
	}
	d.l("crypto map %s set security-association lifetime seconds %s", m, seconds(ip.ESPLifetime))
	d.l("crypto map %s interface %s", phCryptoMap, phOutsideIf)
	d.l("group-policy %s internal", name)
	d.l("group-policy %s attributes", name)
	d.l(" vpn-tunnel-protocol ikev2")
	d.l("tunnel-group %s type ipsec-l2l", p.GatewayAddress)
	d.l("tunnel-group %s general-attributes", p.GatewayAddress)
	d.l(" default-group-policy %s", name)
	d.l("tunnel-group %s ipsec-attributes", p.GatewayAddress)
	d.l(" ikev2 remote-authentication pre-shared-key %s", psk(p))
	d.l(" ikev2 local-authentication pre-shared-key %s", psk(p))
	d.l(" isakmp keepalive threshold %s retry 5", seconds(min(max(dpdDelay(p), 10*time.Second), time.Hour)))
	d.l("sysopt connection tcpmss %d", p.IPsec.MTU-40)
	return d.String(), nil
}

// junosQuote writes a Junos string.
func junosQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// junosID writes an IKE identity for local-identity / remote-identity.
func junosID(id string) (string, error) {
	k, v := classifyID(id)
	switch k {
	case idAddress:
		return "inet " + v, nil
	case idFQDN:
		return "hostname " + v, nil
	case idEmail:
		return "user-at-hostname " + junosQuote(v), nil
	}
	return "", fmt.Errorf("Junos cannot use a %s (%q) as IKE identity with a pre-shared key", k, id)
}

// junosAEADPRF is the PRF Junos ties to an AEAD cipher in IKE (it refuses any other).
var junosAEADPRF = map[string]string{"aes128gcm16": "prfsha256", "aes256gcm16": "prfsha384"}

// renderJunos writes SRX set commands: a route-based VPN bound to st0 with traffic selectors
// equal to the gateway's (so the CHILD_SA carries exactly your networks and our service CIDR).
func renderJunos(p *Params) (string, error) {
	ip := p.IPsec
	if err := checkPSK(p, vJunos); err != nil {
		return "", err
	}
	if err := ikeV2Only(p, vJunos); err != nil {
		return "", err
	}
	ike, skIKE, err := translate(vJunos, IKE, ip.IKE, func(v vproposal) error {
		if !v.P.AEAD() {
			return nil
		}
		for _, e := range v.P.Enc {
			want := junosAEADPRF[e.Name]
			if len(v.P.PRF) != 1 || v.P.PRF[0].Name != want {
				return fmt.Errorf("Junos ties %s in IKE to %s, the gateway's proposal %s does not offer exactly that", e.Name, want, v.P.Raw)
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	esp, skESP, err := translate(vJunos, ESP, ip.ESP, nil)
	if err != nil {
		return "", err
	}
	esp, pfs, skPFS := onePFS(esp)
	skESP = append(skESP, skPFS...)
	local, err := junosID(ip.PeerID)
	if err != nil {
		return "", err
	}
	remote, err := junosID(ip.GatewayID)
	if err != nil {
		return "", err
	}
	name := objectName(p, 32)
	unit := "st0." + phTunnelNumber
	d := &doc{comment: "# "}
	header(d, p, "junos")
	childrenNote(d, p, "traffic-selector")
	skippedNote(d, IKE, skIKE)
	skippedNote(d, ESP, skESP)
	if len(pfs) > 1 {
		d.c("The IPsec policy takes one PFS group: group%s (the gateway also accepts %s).", strings.TrimPrefix(pfs[0], "group"), strings.Join(pfs[1:], ", "))
	}
	d.c("Load with: load set terminal (then commit check, commit).")
	d.blank()
	var ikeNames, espNames []string
	for _, v := range ike {
		// Junos proposals hold one algorithm of each kind: one per combination
		for _, e := range v.Enc {
			for _, g := range v.DH {
				auths := v.Integ
				if v.P.AEAD() {
					auths = []string{""}
				}
				for ai, a := range auths {
					pn := fmt.Sprintf("%s-ike-%d", name, len(ikeNames)+1)
					ikeNames = append(ikeNames, pn)
					base := "set security ike proposal " + pn
					d.l("%s authentication-method pre-shared-keys", base)
					d.l("%s dh-group %s", base, g)
					if a != "" {
						d.l("%s authentication-algorithm %s", base, a)
						if !v.P.prfImplied() {
							d.l("%s prf-algorithm %s", base, v.PRF[min(ai, len(v.PRF)-1)])
						}
					}
					d.l("%s encryption-algorithm %s", base, e)
					d.l("%s lifetime-seconds %s", base, seconds(ip.IKELifetime))
				}
			}
		}
	}
	d.l("set security ike policy %s proposals [ %s ]", name, strings.Join(ikeNames, " "))
	d.l("set security ike policy %s pre-shared-key ascii-text %s", name, junosQuote(psk(p)))
	g := "set security ike gateway " + name
	d.l("%s ike-policy %s", g, name)
	d.l("%s address %s", g, p.GatewayAddress)
	d.l("%s external-interface %s", g, phOutsideIf)
	d.l("%s local-identity %s", g, local)
	d.l("%s remote-identity %s", g, remote)
	d.l("%s version v2-only", g)
	d.l("%s dead-peer-detection probe-idle-tunnel", g)
	d.l("%s dead-peer-detection interval %s", g, seconds(dpdDelay(p)))
	d.l("%s dead-peer-detection threshold %d", g, dpdRetries)
	for _, v := range esp {
		for _, e := range v.Enc {
			auths := v.Integ
			if v.P.AEAD() {
				auths = []string{""}
			}
			for _, a := range auths {
				pn := fmt.Sprintf("%s-esp-%d", name, len(espNames)+1)
				espNames = append(espNames, pn)
				base := "set security ipsec proposal " + pn
				d.l("%s protocol esp", base)
				if a != "" {
					d.l("%s authentication-algorithm %s", base, a)
				}
				d.l("%s encryption-algorithm %s", base, e)
				d.l("%s lifetime-seconds %s", base, seconds(ip.ESPLifetime))
			}
		}
	}
	if len(pfs) > 0 {
		d.l("set security ipsec policy %s perfect-forward-secrecy keys %s", name, pfs[0])
	}
	d.l("set security ipsec policy %s proposals [ %s ]", name, strings.Join(espNames, " "))
	v := "set security ipsec vpn " + name
	d.l("%s bind-interface %s", v, unit)
	d.l("%s ike gateway %s", v, name)
	d.l("%s ike ipsec-policy %s", v, name)
	for i, n := range p.LocalNets {
		d.l("%s traffic-selector ts%d local-ip %s", v, i+1, n)
		d.l("%s traffic-selector ts%d remote-ip %s", v, i+1, p.ServiceCIDR)
	}
	d.l("%s establish-tunnels immediately", v)
	d.l("set interfaces st0 unit %s family inet mtu %d", phTunnelNumber, p.IPsec.MTU)
	d.l("set security zones security-zone %s interfaces %s", phVPNZone, unit)
	d.l("set security flow tcp-mss ipsec-vpn mss %d", p.IPsec.MTU-40)
	d.c("Traffic selectors install the route to %s through %s (auto route insertion);", p.ServiceCIDR, unit)
	d.c("add security policies between your LAN zone and %s.", phVPNZone)
	return d.String(), nil
}

// panID writes a PAN-OS identity: type and value.
func panID(id string) (string, error) {
	k, v := classifyID(id)
	t := map[idKind]string{idAddress: "ipaddr", idFQDN: "fqdn", idEmail: "ufqdn", idKeyID: "keyid", idDN: "dn"}[k]
	return fmt.Sprintf("type %s id %s", t, junosQuote(v)), nil
}

// renderPaloAlto writes PAN-OS set commands: IKE and IPsec crypto profiles, an IKEv2 gateway,
// the tunnel with one proxy ID per local network, and the route.
func renderPaloAlto(p *Params) (string, error) {
	ip := p.IPsec
	if err := checkPSK(p, vPaloalto); err != nil {
		return "", err
	}
	if err := ikeV2Only(p, vPaloalto); err != nil {
		return "", err
	}
	ike, skIKE, err := translate(vPaloalto, IKE, ip.IKE, func(v vproposal) error {
		if !v.P.AEAD() && !v.P.prfImplied() {
			return fmt.Errorf("PAN-OS takes the PRF from the hash; %s names another", v.P.Raw)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	esp, skESP, err := translate(vPaloalto, ESP, ip.ESP, nil)
	if err != nil {
		return "", err
	}
	esp, pfs, skPFS := onePFS(esp)
	skESP = append(skESP, skPFS...)
	local, _ := panID(ip.PeerID)
	remote, _ := panID(ip.GatewayID)
	name := objectName(p, 31)
	tunnel := "tunnel." + phTunnelNumber
	d := &doc{comment: "# "}
	header(d, p, "paloalto")
	childrenNote(d, p, "proxy-id")
	skippedNote(d, IKE, skIKE)
	skippedNote(d, ESP, skESP)
	flattenNote(d, IKE, ike)
	flattenNote(d, ESP, esp)
	if len(pfs) > 1 {
		d.c("The IPsec crypto profile takes one DH group: %s (the gateway also accepts %s).", pfs[0], strings.Join(pfs[1:], ", "))
	}
	d.c("AES-GCM in the IKE crypto profile needs PAN-OS 10.0.3 or later; its hash is the PRF.")
	d.c("Enter in configure mode, then commit.")
	d.blank()
	hashes := union(ike, integOf)
	for _, h := range union(ike, prfOf) {
		hashes = appendStr(hashes, h)
	}
	c := "set network ike crypto-profiles ike-crypto-profiles " + name
	d.l("%s hash [ %s ]", c, strings.Join(hashes, " "))
	d.l("%s dh-group [ %s ]", c, strings.Join(union(ike, dhOf), " "))
	d.l("%s encryption [ %s ]", c, strings.Join(union(ike, encOf), " "))
	d.l("%s lifetime seconds %s", c, seconds(ip.IKELifetime))
	s := "set network ike crypto-profiles ipsec-crypto-profiles " + name
	d.l("%s esp encryption [ %s ]", s, strings.Join(union(esp, encOf), " "))
	auth := union(esp, integOf)
	for _, v := range esp {
		if v.P.AEAD() {
			auth = appendStr(auth, "none")
		}
	}
	d.l("%s esp authentication [ %s ]", s, strings.Join(auth, " "))
	if len(pfs) > 0 {
		d.l("%s dh-group %s", s, pfs[0])
	} else {
		d.l("%s dh-group no-pfs", s)
	}
	d.l("%s lifetime seconds %s", s, seconds(ip.ESPLifetime))
	d.l("set network interface tunnel units %s mtu %d", tunnel, p.IPsec.MTU)
	g := "set network ike gateway " + name
	d.l("%s protocol version ikev2", g)
	d.l("%s protocol ikev2 ike-crypto-profile %s", g, name)
	d.l("%s protocol ikev2 dpd enable yes", g)
	d.l("%s protocol ikev2 dpd interval %s", g, seconds(dpdDelay(p)))
	d.l("%s authentication pre-shared-key key %s", g, junosQuote(psk(p)))
	d.l("%s local-address interface %s", g, phOutsideIf)
	d.l("%s peer-address ip %s", g, p.GatewayAddress)
	d.l("%s local-id %s", g, local)
	d.l("%s peer-id %s", g, remote)
	d.l("%s protocol-common nat-traversal enable yes", g)
	t := "set network tunnel ipsec " + name
	d.l("%s tunnel-interface %s", t, tunnel)
	d.l("%s auto-key ike-gateway %s", t, name)
	d.l("%s auto-key ipsec-crypto-profile %s", t, name)
	for i, n := range p.LocalNets {
		d.l("%s auto-key proxy-id ts%d local %s remote %s protocol any", t, i+1, n, p.ServiceCIDR)
	}
	d.l("set network virtual-router %s routing-table ip static-route %s destination %s interface %s", phVRouter, name, p.ServiceCIDR, tunnel)
	d.l("set network virtual-router %s interface %s", phVRouter, tunnel)
	d.l("set zone %s network layer3 %s", phVPNZone, tunnel)
	d.c("Add security policies between your LAN zone and %s; MSS: set the adjust-tcp-mss of your", phVPNZone)
	d.c("LAN interface's management profile, or of %s, to a value keeping TCP under MTU %d.", tunnel, p.IPsec.MTU)
	return d.String(), nil
}
