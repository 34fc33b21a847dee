package deviceconfig

import (
	"crypto/sha1"
	"encoding/xml"
	"fmt"
	"net/netip"
	"strings"
)

// fortiQuote writes a FortiOS CLI string.
func fortiQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// renderFortigate writes FortiOS CLI: a route-based phase1-interface, one phase2-interface per
// local network, a static route and the two firewall policies.
func renderFortigate(p *Params) (string, error) {
	ip := p.IPsec
	if err := checkPSK(p, vFortigate); err != nil {
		return "", err
	}
	// FortiOS names a phase-1 proposal enc-integ (its PRF is the integrity's hash) or, for
	// AEAD, enc-prf.
	ike, skIKE, err := translate(vFortigate, IKE, ip.IKE, func(v vproposal) error {
		if !v.P.AEAD() && !v.P.prfImplied() {
			return fmt.Errorf("FortiOS takes the PRF from the integrity algorithm; %s names another", v.P.Raw)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	esp, skESP, err := translate(vFortigate, ESP, ip.ESP, nil)
	if err != nil {
		return "", err
	}
	esp, pfs, skPFS := onePFS(esp)
	skESP = append(skESP, skPFS...)
	var p1, p2 []string
	for _, v := range ike {
		second := v.Integ
		if v.P.AEAD() {
			second = v.PRF
		}
		for _, e := range v.Enc {
			for _, s := range second {
				p1 = appendStr(p1, e+"-"+s)
			}
		}
	}
	for _, v := range esp {
		for _, e := range v.Enc {
			if v.P.AEAD() {
				p2 = appendStr(p2, e)
				continue
			}
			for _, s := range v.Integ {
				p2 = appendStr(p2, e+"-"+s)
			}
		}
	}
	idType := map[idKind]string{idAddress: "address", idFQDN: "fqdn", idEmail: "user-fqdn", idDN: "asn1dn", idKeyID: "keyid"}
	lk, lv := classifyID(ip.PeerID)
	_, rv := classifyID(ip.GatewayID)
	name := objectName(p, 15)

	d := &doc{comment: "# "}
	header(d, p, "fortigate")
	childrenNote(d, p, "phase2-interface")
	d.c("Names are at most 15 characters (FortiOS limit): %s.", name)
	skippedNote(d, IKE, skIKE)
	skippedNote(d, ESP, skESP)
	flattenNote(d, IKE, ike)
	d.blank()
	d.l("config vpn ipsec phase1-interface")
	d.l("    edit %s", fortiQuote(name))
	d.l("        set interface %s", fortiQuote(phOutsideIf))
	d.l("        set ike-version %d", ip.IKEVersion)
	if ip.IKEVersion == 1 {
		d.l("        set mode main")
	}
	d.l("        set peertype one")
	d.l("        set peerid %s", fortiQuote(rv))
	d.l("        set net-device disable")
	d.l("        set proposal %s", strings.Join(p1, " "))
	d.l("        set dhgrp %s", strings.Join(union(ike, dhOf), " "))
	d.l("        set remote-gw %s", p.GatewayAddress)
	d.l("        set localid-type %s", idType[lk])
	d.l("        set localid %s", fortiQuote(lv))
	d.l("        set authmethod psk")
	d.l("        set psksecret %s", fortiQuote(psk(p)))
	d.l("        set keylife %s", seconds(ip.IKELifetime))
	d.l("        set dpd on-idle")
	d.l("        set dpd-retryinterval %s", seconds(dpdDelay(p)))
	d.l("        set dpd-retrycount %d", dpdRetries)
	if p.IPsec.ForceEncap {
		d.l("        set nattraversal forced")
	} else {
		d.l("        set nattraversal enable")
	}
	d.l("        set comments %s", fortiQuote(fmt.Sprintf("VPNPeer %s/%s", p.Namespace, p.Peer)))
	d.l("    next")
	d.l("end")
	d.l("config vpn ipsec phase2-interface")
	for i, n := range p.LocalNets {
		p2name := name
		if len(p.LocalNets) > 1 {
			p2name = objectName(p, 15-len(fmt.Sprint(i+1))-1) + fmt.Sprintf("-%d", i+1)
		}
		d.l("    edit %s", fortiQuote(p2name))
		d.l("        set phase1name %s", fortiQuote(name))
		d.l("        set proposal %s", strings.Join(p2, " "))
		if len(pfs) > 0 {
			d.l("        set pfs enable")
			d.l("        set dhgrp %s", strings.Join(pfs, " "))
		} else {
			d.l("        set pfs disable")
		}
		d.l("        set keylifeseconds %s", seconds(ip.ESPLifetime))
		d.l("        set src-subnet %s %s", n.Addr(), netmask(n))
		d.l("        set dst-subnet %s %s", p.ServiceCIDR.Addr(), netmask(p.ServiceCIDR))
		d.l("        set auto-negotiate enable")
		d.l("    next")
	}
	d.l("end")
	d.l("config router static")
	d.l("    edit 0")
	d.l("        set dst %s %s", p.ServiceCIDR.Addr(), netmask(p.ServiceCIDR))
	d.l("        set device %s", fortiQuote(name))
	d.l("    next")
	d.l("end")
	d.l("config firewall address")
	var locals []string
	for i, n := range p.LocalNets {
		an := fmt.Sprintf("%s-l%d", name, i+1)
		locals = append(locals, fortiQuote(an))
		d.l("    edit %s", fortiQuote(an))
		d.l("        set subnet %s %s", n.Addr(), netmask(n))
		d.l("    next")
	}
	d.l("    edit %s", fortiQuote(name+"-r"))
	d.l("        set subnet %s %s", p.ServiceCIDR.Addr(), netmask(p.ServiceCIDR))
	d.l("    next")
	d.l("end")
	d.c("Policies: your networks to ours, and ours to yours (only needed for reverse exposures).")
	d.c("tcp-mss clamps TCP through the tunnel (see MTU/MSS above).")
	d.l("config firewall policy")
	for _, dir := range []struct{ tag, src, dst, sa, da string }{
		{"out", phInsideIf, name, strings.Join(locals, " "), fortiQuote(name + "-r")},
		{"in", name, phInsideIf, fortiQuote(name + "-r"), strings.Join(locals, " ")},
	} {
		d.l("    edit 0")
		d.l("        set name %s", fortiQuote(objectName(p, 31)+"-"+dir.tag))
		d.l("        set srcintf %s", fortiQuote(dir.src))
		d.l("        set dstintf %s", fortiQuote(dir.dst))
		d.l("        set srcaddr %s", dir.sa)
		d.l("        set dstaddr %s", dir.da)
		d.l("        set action accept")
		d.l("        set schedule \"always\"")
		d.l("        set service \"ALL\"")
		d.l("        set tcp-mss-sender %d", p.IPsec.MTU-40)
		d.l("        set tcp-mss-receiver %d", p.IPsec.MTU-40)
		d.l("    next")
	}
	d.l("end")
	return d.String(), nil
}

func appendStr(l []string, s string) []string {
	for _, x := range l {
		if x == s {
			return l
		}
	}
	return append(l, s)
}

// xmlText escapes s for XML character data.
func xmlText(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// xmlComment writes s safe inside <!-- --> (which cannot hold "--": flags are named in words).
func xmlComment(s string) string {
	s = strings.NewReplacer("--format ", "with format ", "--include-secrets", "with the include-secrets flag").Replace(s)
	return strings.ReplaceAll(s, "--", "- -")
}

// uuidFor is a stable UUID (version 5 layout) from a name: the same peer always gets the same
// object IDs, so a re-import replaces instead of duplicating.
func uuidFor(parts ...string) string {
	h := sha1.Sum([]byte("bnerd-vpn-operator/" + strings.Join(parts, "/")))
	h[6] = (h[6] & 0x0f) | 0x50
	h[8] = (h[8] & 0x3f) | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// xmlDoc is a doc whose comments are XML comments.
func xmlDoc() *doc { return &doc{comment: ""} }

// xmlHeader writes the common header as one XML comment.
func xmlHeader(p *Params, format string, extra ...string) string {
	tmp := &doc{comment: "  "}
	header(tmp, p, format)
	for _, e := range extra {
		tmp.c("%s", e)
	}
	return "<!--\n" + xmlComment(tmp.String()) + "-->\n"
}

// renderPfsense writes pfSense's <ipsec> section: one phase1 with one encryption item per
// algorithm combination the gateway accepts, one phase2 per local network (pfSense merges an
// IKEv2 connection's phase 2 entries into one CHILD_SA, as the gateway has it).
func renderPfsense(p *Params) (string, error) {
	ip := p.IPsec
	if err := checkPSK(p, vPfsense); err != nil {
		return "", err
	}
	ike, skIKE, err := translate(vPfsense, IKE, ip.IKE, nil)
	if err != nil {
		return "", err
	}
	esp, skESP, err := translate(vPfsense, ESP, ip.ESP, nil)
	if err != nil {
		return "", err
	}
	esp, pfs, skPFS := onePFS(esp)
	skESP = append(skESP, skPFS...)
	idType := map[idKind]string{idAddress: "address", idFQDN: "fqdn", idEmail: "user_fqdn", idDN: "asn1dn", idKeyID: "keyid tag"}
	lk, lv := classifyID(ip.PeerID)
	rk, rv := classifyID(ip.GatewayID)
	var notes []string
	for _, s := range skIKE {
		notes = append(notes, "Left out (IKE proposal the device cannot express): "+s)
	}
	for _, s := range skESP {
		notes = append(notes, "Left out (ESP proposal the device cannot express): "+s)
	}
	if len(pfs) > 1 {
		notes = append(notes, fmt.Sprintf("pfSense has one PFS group per phase 2: %s is used (the gateway also accepts %s).", pfs[0], strings.Join(pfs[1:], ", ")))
	}
	notes = append(notes,
		"Paste into config.xml under <pfsense> (merge with an existing <ipsec>), or enter the same values in",
		"VPN > IPsec. {{IKEID}} is a phase 1 number not yet used on your pfSense; {{REQID}} likewise for phase 2.")
	var b strings.Builder
	b.WriteString(xmlHeader(p, "pfsense", notes...))
	w := func(indent int, format string, args ...any) {
		b.WriteString(strings.Repeat("\t", indent))
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}
	w(0, "<ipsec>")
	w(1, "<phase1>")
	w(2, "<ikeid>{{IKEID}}</ikeid>")
	w(2, "<iketype>ikev%d</iketype>", ip.IKEVersion)
	if ip.IKEVersion == 1 {
		w(2, "<mode>main</mode>")
	}
	w(2, "<interface>%s</interface>", xmlText(phOutsideIf))
	w(2, "<remote-gateway>%s</remote-gateway>", xmlText(p.GatewayAddress))
	w(2, "<protocol>inet</protocol>")
	w(2, "<myid_type>%s</myid_type>", idType[lk])
	w(2, "<myid_data>%s</myid_data>", xmlText(lv))
	w(2, "<peerid_type>%s</peerid_type>", idType[rk])
	w(2, "<peerid_data>%s</peerid_data>", xmlText(rv))
	w(2, "<encryption>")
	for _, v := range ike {
		hashes := v.Integ
		if v.P.AEAD() {
			// pfSense wants a hash even beside AEAD; the PRF's hash is the honest one
			hashes = v.PRF
		}
		for _, e := range v.Enc {
			for _, h := range hashes {
				for _, prf := range v.PRF {
					for _, g := range v.DH {
						en, kl, _ := strings.Cut(e, ":")
						w(3, "<item>")
						w(4, "<encryption-algorithm>")
						w(5, "<name>%s</name>", en)
						w(5, "<keylen>%s</keylen>", kl)
						w(4, "</encryption-algorithm>")
						w(4, "<hash-algorithm>%s</hash-algorithm>", h)
						w(4, "<prf-algorithm>%s</prf-algorithm>", prf)
						w(4, "<dhgroup>%s</dhgroup>", g)
						w(3, "</item>")
					}
				}
			}
		}
	}
	w(2, "</encryption>")
	w(2, "<lifetime>%s</lifetime>", seconds(ip.IKELifetime+ip.IKELifetime/10))
	w(2, "<rekey_time>%s</rekey_time>", seconds(ip.IKELifetime))
	if ip.ReauthTime > 0 {
		w(2, "<reauth_time>%s</reauth_time>", seconds(ip.ReauthTime))
	}
	w(2, "<pre-shared-key>%s</pre-shared-key>", xmlText(psk(p)))
	w(2, "<authentication_method>pre_shared_key</authentication_method>")
	w(2, "<descr>%s</descr>", xmlText(fmt.Sprintf("VPNPeer %s/%s", p.Namespace, p.Peer)))
	if p.IPsec.ForceEncap {
		w(2, "<nat_traversal>force</nat_traversal>")
	} else {
		w(2, "<nat_traversal>on</nat_traversal>")
	}
	w(2, "<mobike>off</mobike>")
	w(2, "<startaction>start</startaction>")
	w(2, "<closeaction>start</closeaction>")
	w(2, "<dpd_delay>%s</dpd_delay>", seconds(dpdDelay(p)))
	w(2, "<dpd_maxfail>%d</dpd_maxfail>", dpdRetries)
	w(1, "</phase1>")
	for i, n := range p.LocalNets {
		w(1, "<phase2>")
		w(2, "<ikeid>{{IKEID}}</ikeid>")
		w(2, "<uniqid>%s</uniqid>", strings.ReplaceAll(uuidFor(p.Namespace, p.Gateway, p.Peer, "p2", fmt.Sprint(i)), "-", "")[:13])
		w(2, "<mode>tunnel</mode>")
		w(2, "<reqid>{{REQID}}</reqid>")
		w(2, "<localid>")
		w(3, "<type>network</type>")
		w(3, "<address>%s</address>", n.Addr())
		w(3, "<netbits>%d</netbits>", n.Bits())
		w(2, "</localid>")
		w(2, "<remoteid>")
		w(3, "<type>network</type>")
		w(3, "<address>%s</address>", p.ServiceCIDR.Addr())
		w(3, "<netbits>%d</netbits>", p.ServiceCIDR.Bits())
		w(2, "</remoteid>")
		w(2, "<protocol>esp</protocol>")
		for _, e := range union(esp, encOf) {
			en, kl, _ := strings.Cut(e, ":")
			w(2, "<encryption-algorithm-option>")
			w(3, "<name>%s</name>", en)
			w(3, "<keylen>%s</keylen>", kl)
			w(2, "</encryption-algorithm-option>")
		}
		for _, h := range union(esp, integOf) {
			w(2, "<hash-algorithm-option>%s</hash-algorithm-option>", h)
		}
		if len(pfs) > 0 {
			w(2, "<pfsgroup>%s</pfsgroup>", pfs[0])
		} else {
			w(2, "<pfsgroup>0</pfsgroup>")
		}
		w(2, "<lifetime>%s</lifetime>", seconds(ip.ESPLifetime+ip.ESPLifetime/10))
		w(2, "<rekey_time>%s</rekey_time>", seconds(ip.ESPLifetime))
		w(2, "<descr>%s</descr>", xmlText(fmt.Sprintf("VPNPeer %s/%s %s", p.Namespace, p.Peer, n)))
		w(1, "</phase2>")
	}
	w(0, "</ipsec>")
	return b.String(), nil
}

// renderOpnsense writes OPNsense's connection model (VPN > IPsec > Connections, 23.1+), which
// is swanctl underneath: proposals in strongSwan notation, the PSK in the IPsec model.
func renderOpnsense(p *Params) (string, error) {
	ip := p.IPsec
	if err := checkPSK(p, ""); err != nil {
		return "", err
	}
	conn := uuidFor(p.Namespace, p.Gateway, p.Peer, "connection")
	local := uuidFor(p.Namespace, p.Gateway, p.Peer, "local")
	remote := uuidFor(p.Namespace, p.Gateway, p.Peer, "remote")
	child := uuidFor(p.Namespace, p.Gateway, p.Peer, "child")
	key := uuidFor(p.Namespace, p.Gateway, p.Peer, "psk")
	desc := xmlText(fmt.Sprintf("VPNPeer %s/%s", p.Namespace, p.Peer))
	var ikeProps []string
	for _, pr := range ip.IKE {
		if pr.AEAD() {
			// OPNsense's proposal list names an AEAD proposal's PRF by its hash
			// (aes256gcm16-sha256-ecp256), which charon reads as the PRF
			var parts []string
			for _, a := range pr.Enc {
				parts = append(parts, a.Name)
			}
			for _, f := range pr.PRF {
				parts = append(parts, hashOf(f).Name)
			}
			for _, a := range pr.DH {
				parts = append(parts, a.Name)
			}
			ikeProps = append(ikeProps, strings.Join(parts, "-"))
			continue
		}
		ikeProps = append(ikeProps, pr.String(IKE))
	}
	var b strings.Builder
	b.WriteString(xmlHeader(p, "opnsense",
		"Merge into config.xml under <opnsense> (System > Configuration > Backups: download, edit, restore),",
		"or enter the same values in VPN > IPsec > Connections and Pre-Shared Keys. The UUIDs are fixed per peer."))
	w := func(indent int, format string, args ...any) {
		b.WriteString(strings.Repeat("\t", indent))
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}
	w(0, "<OPNsense>")
	w(1, "<IPsec>")
	w(2, "<general><enabled>1</enabled></general>")
	w(2, "<preSharedKeys>")
	w(3, "<preSharedKey uuid=\"%s\">", key)
	w(4, "<ident>%s</ident>", xmlText(ip.PeerID))
	w(4, "<remote_ident>%s</remote_ident>", xmlText(ip.GatewayID))
	w(4, "<keyType>PSK</keyType>")
	w(4, "<Key>%s</Key>", xmlText(psk(p)))
	w(4, "<description>%s</description>", desc)
	w(3, "</preSharedKey>")
	w(2, "</preSharedKeys>")
	w(1, "</IPsec>")
	w(1, "<Swanctl>")
	w(2, "<Connections>")
	w(3, "<Connection uuid=\"%s\">", conn)
	w(4, "<enabled>1</enabled>")
	w(4, "<proposals>%s</proposals>", strings.Join(ikeProps, ","))
	w(4, "<unique>no</unique>")
	w(4, "<aggressive>0</aggressive>")
	w(4, "<version>%d</version>", ip.IKEVersion)
	w(4, "<mobike>0</mobike>")
	w(4, "<local_addrs/>")
	w(4, "<remote_addrs>%s</remote_addrs>", xmlText(p.GatewayAddress))
	w(4, "<encap>0</encap>")
	w(4, "<reauth_time>%s</reauth_time>", seconds(ip.ReauthTime))
	w(4, "<rekey_time>%s</rekey_time>", seconds(ip.IKELifetime))
	w(4, "<dpd_delay>%s</dpd_delay>", seconds(dpdDelay(p)))
	w(4, "<keyingtries>0</keyingtries>")
	w(4, "<description>%s</description>", desc)
	w(3, "</Connection>")
	w(2, "</Connections>")
	w(2, "<locals>")
	w(3, "<local uuid=\"%s\">", local)
	w(4, "<enabled>1</enabled>")
	w(4, "<connection>%s</connection>", conn)
	w(4, "<round>0</round>")
	w(4, "<auth>psk</auth>")
	w(4, "<id>%s</id>", xmlText(ip.PeerID))
	w(4, "<description>%s</description>", desc)
	w(3, "</local>")
	w(2, "</locals>")
	w(2, "<remotes>")
	w(3, "<remote uuid=\"%s\">", remote)
	w(4, "<enabled>1</enabled>")
	w(4, "<connection>%s</connection>", conn)
	w(4, "<round>0</round>")
	w(4, "<auth>psk</auth>")
	w(4, "<id>%s</id>", xmlText(ip.GatewayID))
	w(4, "<description>%s</description>", desc)
	w(3, "</remote>")
	w(2, "</remotes>")
	w(2, "<children>")
	for i, ts := range childSets(p) {
		id := child
		if i > 0 {
			id = uuidFor(p.Namespace, p.Gateway, p.Peer, "child", fmt.Sprint(i))
		}
		w(3, "<child uuid=\"%s\">", id)
		w(4, "<enabled>1</enabled>")
		w(4, "<connection>%s</connection>", conn)
		w(4, "<esp_proposals>%s</esp_proposals>", strings.Join(proposalStrings(ESP, ip.ESP), ","))
		w(4, "<start_action>start</start_action>")
		w(4, "<close_action>start</close_action>")
		w(4, "<dpd_action>restart</dpd_action>")
		w(4, "<mode>tunnel</mode>")
		w(4, "<policies>1</policies>")
		w(4, "<local_ts>%s</local_ts>", strings.Join(ts, ","))
		w(4, "<remote_ts>%s</remote_ts>", p.ServiceCIDR)
		w(4, "<rekey_time>%s</rekey_time>", seconds(ip.ESPLifetime))
		w(4, "<description>%s</description>", desc)
		w(3, "</child>")
	}
	w(2, "</children>")
	w(1, "</Swanctl>")
	w(0, "</OPNsense>")
	return b.String(), nil
}

// mikrotikID writes an identity in RouterOS's type:value form.
func mikrotikID(id string) (string, error) {
	k, v := classifyID(id)
	switch k {
	case idAddress:
		return "address:" + v, nil
	case idFQDN:
		return "fqdn:" + v, nil
	case idEmail:
		return "user-fqdn:" + v, nil
	case idKeyID:
		return "key-id:" + v, nil
	}
	return "", fmt.Errorf("MikroTik RouterOS cannot use a %s (%q) as IKE identity with a pre-shared key", k, id)
}

// mikrotikQuote writes a RouterOS string.
func mikrotikQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`).Replace(s) + `"`
}

// renderMikrotik writes a RouterOS v7 script: profile, peer, proposal, identity, one policy
// per local network, and the NAT and FastTrack bypass rules tunnelled traffic needs.
func renderMikrotik(p *Params) (string, error) {
	ip := p.IPsec
	if err := checkPSK(p, vMikrotik); err != nil {
		return "", err
	}
	ike, skIKE, err := translate(vMikrotik, IKE, ip.IKE, nil)
	if err != nil {
		return "", err
	}
	esp, skESP, err := translate(vMikrotik, ESP, ip.ESP, nil)
	if err != nil {
		return "", err
	}
	esp, pfs, skPFS := onePFS(esp)
	skESP = append(skESP, skPFS...)
	myID, err := mikrotikID(ip.PeerID)
	if err != nil {
		return "", err
	}
	remoteID, err := mikrotikID(ip.GatewayID)
	if err != nil {
		return "", err
	}
	hashes := union(ike, integOf)
	prfs := union(ike, prfOf)
	name := objectName(p, 40)
	d := &doc{comment: "# "}
	header(d, p, "mikrotik")
	childrenNote(d, p, "/ip ipsec policy")
	skippedNote(d, IKE, skIKE)
	skippedNote(d, ESP, skESP)
	flattenNote(d, IKE, ike)
	flattenNote(d, ESP, esp)
	if len(hashes) > 1 {
		d.c("RouterOS takes one IKE hash: %s (the gateway also accepts %s).", hashes[0], strings.Join(hashes[1:], ", "))
	}
	if len(pfs) > 1 {
		d.c("RouterOS takes one PFS group: %s (the gateway also accepts %s).", pfs[0], strings.Join(pfs[1:], ", "))
	}
	d.c("Paste into a terminal or import with /import file-name=%s.rsc.", name)
	d.blank()
	profile := []string{"name=" + name, "enc-algorithm=" + strings.Join(union(ike, encOf), ","),
		"dh-group=" + strings.Join(union(ike, dhOf), ","), "prf-algorithm=" + prfs[0],
		"lifetime=" + swanDuration(ip.IKELifetime), "dpd-interval=" + swanDuration(dpdDelay(p)),
		fmt.Sprintf("dpd-maximum-failures=%d", dpdRetries), "nat-traversal=yes"}
	if len(hashes) > 0 {
		profile = append(profile[:2], append([]string{"hash-algorithm=" + hashes[0]}, profile[2:]...)...)
	}
	d.l("/ip ipsec profile add %s", strings.Join(profile, " "))
	exch := "ike2"
	if ip.IKEVersion == 1 {
		exch = "main"
	}
	d.l("/ip ipsec peer add name=%s address=%s/32 exchange-mode=%s profile=%s send-initial-contact=yes", name, p.GatewayAddress, exch, name)
	auth := union(esp, integOf)
	if len(auth) == 0 {
		auth = []string{"null"}
	}
	pg := "none"
	if len(pfs) > 0 {
		pg = pfs[0]
	}
	d.l("/ip ipsec proposal add name=%s enc-algorithms=%s auth-algorithms=%s pfs-group=%s lifetime=%s",
		name, strings.Join(union(esp, encOf), ","), strings.Join(auth, ","), pg, swanDuration(ip.ESPLifetime))
	d.l("/ip ipsec identity add peer=%s auth-method=pre-shared-key secret=%s my-id=%s remote-id=%s generate-policy=no",
		name, mikrotikQuote(psk(p)), mikrotikQuote(myID), mikrotikQuote(remoteID))
	level := "require"
	if len(p.LocalNets) > 1 && ip.IKEVersion == 2 {
		level = "unique"
	}
	for _, n := range p.LocalNets {
		d.l("/ip ipsec policy add peer=%s tunnel=yes src-address=%s dst-address=%s proposal=%s action=encrypt level=%s",
			name, n, p.ServiceCIDR, name, level)
	}
	d.c("Tunnelled traffic must not be source-NATed nor fast-tracked (place these before your masquerade and fasttrack rules):")
	for _, n := range p.LocalNets {
		d.l("/ip firewall nat add chain=srcnat action=accept src-address=%s dst-address=%s place-before=0 comment=%s", n, p.ServiceCIDR, name)
		d.l("/ip firewall raw add chain=prerouting action=notrack src-address=%s dst-address=%s comment=%s", n, p.ServiceCIDR, name)
		d.l("/ip firewall raw add chain=prerouting action=notrack src-address=%s dst-address=%s comment=%s", p.ServiceCIDR, n, name)
	}
	d.l("/ip firewall mangle add chain=forward action=change-mss new-mss=%d protocol=tcp tcp-flags=syn tcp-mss=%d-65535 dst-address=%s comment=%s", p.IPsec.MTU-40, p.IPsec.MTU-39, p.ServiceCIDR, name)
	return d.String(), nil
}

// prefixesOf is a list helper for templates.
func prefixesOf(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}
