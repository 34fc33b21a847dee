package deviceconfig

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// Format is one output format.
type Format struct {
	Name        string
	Description string
	// IPsec and WireGuard: which peers the format is for.
	IPsec, WireGuard bool
	render           func(*Params) (string, error)
}

var formats []Format

func init() {
	formats = []Format{
		{Name: "strongswan", Description: "strongSwan swanctl.conf (5.9+)", IPsec: true, render: renderStrongSwan},
		{Name: "libreswan", Description: "libreswan ipsec.conf conn (4.x)", IPsec: true, render: renderLibreswan},
		{Name: "wg-quick", Description: "wg-quick(8) configuration", WireGuard: true, render: renderWGQuick},
		{Name: "fortigate", Description: "FortiGate FortiOS 7 CLI (route-based, phase1/phase2-interface)", IPsec: true, render: renderFortigate},
		{Name: "pfsense", Description: "pfSense config.xml <ipsec> fragment (2.5+)", IPsec: true, render: renderPfsense},
		{Name: "opnsense", Description: "OPNsense config.xml Swanctl/IPsec fragment (23.1+ connections)", IPsec: true, render: renderOpnsense},
		{Name: "mikrotik", Description: "MikroTik RouterOS v7 script", IPsec: true, render: renderMikrotik},
		{Name: "cisco-ios", Description: "Cisco IOS-XE, IKEv2 static VTI", IPsec: true, render: renderCiscoIOS},
		{Name: "cisco-asa", Description: "Cisco ASA 9.x, IKEv2 crypto map", IPsec: true, render: renderCiscoASA},
		{Name: "junos", Description: "Juniper SRX Junos set commands (route-based, st0)", IPsec: true, render: renderJunos},
		{Name: "paloalto", Description: "Palo Alto PAN-OS 10+ set commands", IPsec: true, render: renderPaloAlto},
		{Name: "sheet", Description: "the parameter sheet (YAML) `kubectl vpn import` reads", IPsec: true, WireGuard: true, render: renderSheet},
	}
}

// Formats lists the formats in order.
func Formats() []Format { return slices.Clone(formats) }

// FormatNames lists the formats' names.
func FormatNames() []string {
	out := make([]string, len(formats))
	for i, f := range formats {
		out[i] = f.Name
	}
	return out
}

// Render writes p in the named format, or says why it cannot.
func Render(p *Params, format string) (string, error) {
	for _, f := range formats {
		if f.Name != format {
			continue
		}
		switch p.Protocol {
		case model.ProtocolIPsec:
			if !f.IPsec {
				return "", fmt.Errorf("format %s is for WireGuard peers; peer %s is an IPsec peer (formats for it: %s)", format, p.Peer, strings.Join(formatsFor(true), ", "))
			}
		case model.ProtocolWireGuard:
			if !f.WireGuard {
				return "", fmt.Errorf("format %s is for IPsec peers; peer %s is a WireGuard peer (formats for it: %s)", format, p.Peer, strings.Join(formatsFor(false), ", "))
			}
		}
		return f.render(p)
	}
	return "", fmt.Errorf("unknown format %q (known: %s)", format, strings.Join(FormatNames(), ", "))
}

func formatsFor(ipsec bool) []string {
	var out []string
	for _, f := range formats {
		if (ipsec && f.IPsec) || (!ipsec && f.WireGuard) {
			out = append(out, f.Name)
		}
	}
	return out
}

// RenderInput resolves and renders in one step.
func RenderInput(in Input, format string) (string, error) {
	p, err := Resolve(in)
	if err != nil {
		return "", err
	}
	return Render(p, format)
}

// Placeholders: values only the client knows. Everything else is filled in.
const (
	phOutsideIf  = "{{OUTSIDE_INTERFACE}}"
	phInsideIf   = "{{INSIDE_INTERFACE}}"
	phOutsideIP  = "{{OUTSIDE_ADDRESS}}"
	phPSK        = "{{PRE_SHARED_KEY}}"
	phPrivateKey = "{{YOUR_WIREGUARD_PRIVATE_KEY}}"
	phTunnelIf   = "{{TUNNEL_UNIT}}"
	phVPNZone    = "{{VPN_ZONE}}"
	phVRouter    = "{{VIRTUAL_ROUTER}}"
	phCryptoMap  = "{{CRYPTO_MAP_NAME}}"
	phWGAddress  = "{{AN_ADDRESS_IN_YOUR_LOCAL_NETWORKS}}/32"
)

// doc is a text builder with the format's comment prefix.
type doc struct {
	b       strings.Builder
	comment string
}

func (d *doc) c(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	for _, l := range strings.Split(s, "\n") {
		if l == "" {
			d.b.WriteString(strings.TrimRight(d.comment, " ") + "\n")
			continue
		}
		d.b.WriteString(d.comment + l + "\n")
	}
}

func (d *doc) l(format string, args ...any) {
	d.b.WriteString(fmt.Sprintf(format, args...))
	d.b.WriteByte('\n')
}

func (d *doc) blank() { d.b.WriteByte('\n') }

func (d *doc) String() string { return d.b.String() }

// header writes what every format starts with: whose configuration it is, the values that
// matter, and what the client must fill in.
// childrenNote says which CHILD_SAs (phase 2 SAs) the configuration negotiates, each named by
// its traffic selectors and the device's word for what creates it: one per local network, as
// the gateway expects (it gives each network's SAs their own binding).
func childrenNote(d *doc, p *Params, unit string) {
	pairs := make([]string, len(p.LocalNets))
	for i, n := range p.LocalNets {
		pairs[i] = fmt.Sprintf("%s === %s", n, p.ServiceCIDR)
	}
	if len(pairs) == 1 {
		d.c("Phase 2: one CHILD_SA (one %s): %s.", unit, pairs[0])
		return
	}
	d.c("Phase 2: one CHILD_SA per local network (one %s each), %d: %s.", unit, len(pairs), strings.Join(pairs, ", "))
}

func header(d *doc, p *Params, format string) {
	f := formatByName(format)
	d.c("%s for VPNPeer %s/%s of VPNGateway %s/%s,", f.Description, p.Namespace, p.Peer, p.Namespace, p.Gateway)
	d.c("generated by kubectl-vpn peer-config --format %s.", format)
	d.c("  our gateway:          %s", p.GatewayAddress)
	if p.IPsec != nil {
		d.c("  our IKE identity:     %s", p.IPsec.GatewayID)
		d.c("  your IKE identity:    %s", p.IPsec.PeerID)
		if p.IPsec.PeerAddress != "%any" {
			d.c("  we expect you at:     %s", p.IPsec.PeerAddress)
		}
	}
	d.c("  your remote network:  %s (our service CIDR; it never changes)", p.ServiceCIDR)
	d.c("  your local networks:  %s", joinPrefixes(p.LocalNets, ", "))
	if len(p.Withheld) > 0 {
		d.c("  NOT carried:          %s (%s)", joinPrefixes(p.Withheld, ", "), p.WithheldReason)
	}
	d.c("Replace every {{...}} placeholder: those are values only you know.")
	if p.PSK == "" {
		if p.IPsec != nil {
			d.c("The pre-shared key is in Secret %s/%s (key %q): kubectl vpn peer-config %s --include-secrets fills it in.",
				p.Namespace, p.IPsec.PSKSecret.Name, p.IPsec.PSKSecret.Key, p.Peer)
		} else if w := p.WireGuard; w != nil && w.PresharedKeySecret != nil {
			d.c("The preshared key is in Secret %s/%s (key %q): kubectl vpn peer-config %s --include-secrets fills it in.",
				p.Namespace, w.PresharedKeySecret.Name, w.PresharedKeySecret.Key, p.Peer)
		}
	} else {
		d.c("This file contains the pre-shared key: keep it secret.")
	}
	if ip := p.IPsec; ip != nil {
		d.c("MTU/MSS: ESP in UDP (NAT-T) adds up to ~73 bytes with AES-GCM and ~93 with AES-CBC/SHA-2:")
		if ip.MTU == model.DefaultIPsecMTU {
			d.c("on a 1500-byte uplink set the tunnel MTU to 1400 and clamp TCP MSS to 1360 (PPPoE: 1392/1352).")
		} else {
			d.c("the gateway's tunnel MTU is %d: set yours to %d and clamp TCP MSS to %d.", ip.MTU, ip.MTU, ip.MTU-40)
		}
		if ip.ForceEncap {
			d.c("NAT-T is forced: the gateway sends ESP in UDP 4500 even without a NAT; allow UDP 500 and")
			d.c("4500 to and from it and force NAT traversal (UDP encapsulation) on your device too.")
		}
	}
}

func formatByName(n string) Format {
	for _, f := range formats {
		if f.Name == n {
			return f
		}
	}
	return Format{Name: n, Description: n}
}

// pskForbidden are the characters a vendor's syntax cannot carry in an (unquoted or
// simply quoted) pre-shared key.
var pskForbidden = map[string]string{
	vCiscoIOS:  " \t?\"",
	vCiscoASA:  " \t?\"",
	vLibreswan: "\"",
	vMikrotik:  "",
	vFortigate: "",
}

// checkPSK refuses a key the vendor's syntax cannot carry (never echoing it).
func checkPSK(p *Params, vendor string) error {
	if p.PSK == "" {
		return nil
	}
	for _, r := range p.PSK {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("the pre-shared key contains a control character: no device configuration can carry it")
		}
	}
	if bad := pskForbidden[vendor]; bad != "" && strings.ContainsAny(p.PSK, bad) {
		return fmt.Errorf("the pre-shared key contains one of %q, which %s's syntax cannot carry: set a key without them (or leave out --include-secrets and type it in)", bad, vendorTitle[vendor])
	}
	return nil
}

// psk is the key or its placeholder.
func psk(p *Params) string {
	if p.PSK != "" {
		return p.PSK
	}
	return phPSK
}

func joinPrefixes(ps []netip.Prefix, sep string) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, sep)
}

// netmask writes a prefix's mask in dotted form.
func netmask(p netip.Prefix) string {
	bits := p.Bits()
	var m [4]byte
	for i := 0; i < bits; i++ {
		m[i/8] |= 1 << (7 - i%8)
	}
	return netip.AddrFrom4(m).String()
}

// wildcard writes a prefix's Cisco wildcard mask.
func wildcard(p netip.Prefix) string {
	m := netip.MustParseAddr(netmask(p)).As4()
	for i := range m {
		m[i] = ^m[i]
	}
	return netip.AddrFrom4(m).String()
}

func seconds(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}

// swanDuration writes d in swanctl's notation (largest exact unit).
func swanDuration(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	switch {
	case s == 0:
		return "0s"
	case s%3600 == 0:
		return strconv.FormatInt(s/3600, 10) + "h"
	case s%60 == 0:
		return strconv.FormatInt(s/60, 10) + "m"
	}
	return strconv.FormatInt(s, 10) + "s"
}

// Identity kinds.
type idKind int

const (
	idAddress idKind = iota
	idFQDN
	idEmail
	idDN
	idKeyID
)

// classifyID reads an IKE identity as strongSwan does: an IP address, a DN (contains '='),
// a key ID (@#hex), an email (user@host), else an FQDN ('@' prefix stripped).
func classifyID(id string) (idKind, string) {
	if _, err := netip.ParseAddr(id); err == nil {
		return idAddress, id
	}
	switch {
	case strings.HasPrefix(id, "@#"):
		return idKeyID, strings.TrimPrefix(id, "@#")
	case strings.Contains(id, "="):
		return idDN, id
	case strings.HasPrefix(id, "@"):
		return idFQDN, strings.TrimPrefix(id, "@")
	case strings.Contains(id, "@"):
		return idEmail, id
	}
	return idFQDN, id
}

func (k idKind) String() string {
	return [...]string{"IP address", "FQDN", "email (user@FQDN)", "distinguished name", "key ID"}[k]
}

// vendorTitle is a vendor's name in messages.
var vendorTitle = map[string]string{
	vFortigate: "FortiGate", vPfsense: "pfSense", vMikrotik: "MikroTik RouterOS",
	vCiscoIOS: "Cisco IOS-XE", vCiscoASA: "Cisco ASA", vJunos: "Junos", vPaloalto: "PAN-OS",
	vLibreswan: "libreswan",
}

// vproposal is a proposal in a vendor's names (lists in preference order, empty DH in ESP:
// no PFS).
type vproposal struct {
	Enc, Integ, PRF, DH []string
	P                   Proposal
}

// translate maps proposals to a vendor's names. An algorithm the vendor cannot do is dropped
// from its proposal; a proposal left without one of its kinds is dropped with the reason
// (the remaining ones are a subset of what the gateway accepts, so the tunnel still comes
// up). extra refuses combinations the table cannot express. When nothing is left, the error
// names every proposal and why.
func translate(vendor string, ctx Context, props []Proposal, extra func(vproposal) error) ([]vproposal, []string, error) {
	var out []vproposal
	var skipped []string
	for _, p := range props {
		vp := vproposal{P: p}
		var why []string
		m := func(kind Kind, as []*Algorithm) []string {
			var names []string
			for _, a := range as {
				if n := vendorName(vendor, ctx, a); n != "" {
					names = append(names, n)
				} else {
					why = append(why, fmt.Sprintf("%s has no %s for %s", vendorTitle[vendor], a.Name, ctx))
				}
			}
			return names
		}
		vp.Enc = m(Encryption, p.Enc)
		vp.Integ = m(Integrity, p.Integ)
		if ctx == IKE {
			vp.PRF = m(PRF, p.PRF)
		}
		vp.DH = m(DH, p.DH)
		ok := len(vp.Enc) > 0 && (len(p.Integ) == 0 || len(vp.Integ) > 0) &&
			(ctx == ESP || len(vp.PRF) > 0) && (len(p.DH) == 0 || len(vp.DH) > 0)
		if ok && extra != nil {
			if err := extra(vp); err != nil {
				ok = false
				why = append(why, err.Error())
			}
		}
		if !ok {
			skipped = append(skipped, fmt.Sprintf("%s: %s", p.String(ctx), strings.Join(why, "; ")))
			continue
		}
		out = append(out, vp)
	}
	if len(out) == 0 {
		return nil, skipped, fmt.Errorf("%s cannot do any of the gateway's %s proposals: %s", vendorTitle[vendor], ctx, strings.Join(skipped, " | "))
	}
	return out, skipped, nil
}

// union collects one kind's names across proposals, in order, without duplicates.
func union(vps []vproposal, get func(vproposal) []string) []string {
	var out []string
	for _, vp := range vps {
		for _, n := range get(vp) {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

func encOf(v vproposal) []string   { return v.Enc }
func integOf(v vproposal) []string { return v.Integ }
func prfOf(v vproposal) []string   { return v.PRF }
func dhOf(v vproposal) []string    { return v.DH }

// skippedNote writes why proposals were left out.
func skippedNote(d *doc, ctx Context, skipped []string) {
	for _, s := range skipped {
		d.c("Left out (%s proposal the device cannot express; the others still match the gateway): %s", ctx, s)
	}
}

// flattenNote explains a union of proposals on devices with a single algorithm set.
func flattenNote(d *doc, ctx Context, vps []vproposal) {
	if len(vps) < 2 {
		return
	}
	var raw []string
	for _, v := range vps {
		raw = append(raw, v.P.String(ctx))
	}
	d.c("This device offers one set of %s algorithms; the gateway accepts only these combinations of it: %s.", ctx, strings.Join(raw, ", "))
}

// onePFS is for devices with one PFS setting for all ESP proposals: when the gateway's ESP
// proposals mix PFS and no PFS, only those with PFS are kept (the others are noted as left
// out). groups are the PFS groups in order (empty: no PFS).
func onePFS(vps []vproposal) (kept []vproposal, groups []string, left []string) {
	groups = union(vps, dhOf)
	if len(groups) == 0 {
		return vps, nil, nil
	}
	for _, v := range vps {
		if len(v.DH) == 0 {
			left = append(left, v.P.String(ESP)+": without PFS, and this device uses one PFS setting for all proposals")
			continue
		}
		kept = append(kept, v)
	}
	return kept, groups, left
}

// ikeV2Only refuses IKEv1 for templates written for IKEv2.
func ikeV2Only(p *Params, vendor string) error {
	if p.IPsec.IKEVersion != 2 {
		return fmt.Errorf("the %s configuration is generated for IKEv2 only; the gateway uses IKEv%d (set spec.ipsec.ike.version: 2)", vendorTitle[vendor], p.IPsec.IKEVersion)
	}
	return nil
}

// objectName is a device object name derived from the gateway and peer: lowercase letters,
// digits and '-', at most max characters (a hash suffix keeps long names unique).
func objectName(p *Params, max int) string {
	s := "bnerd-" + p.Gateway + "-" + p.Peer
	s = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		}
		return '-'
	}, s)
	if len(s) <= max {
		return s
	}
	h := fnv32(s)
	suffix := fmt.Sprintf("-%04x", h&0xffff)
	return strings.TrimRight(s[:max-len(suffix)], "-") + suffix
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// dpdRetries is how many missed DPD probes a client waits before declaring the gateway dead:
// strongSwan's default retransmission (5 tries, ~165 s) is what the gateway itself waits.
const dpdRetries = 5

// dpdDelay is the client's DPD interval: the gateway's, or 30 s when the gateway has DPD off
// (the client should still notice a gateway that went away).
func dpdDelay(p *Params) time.Duration {
	if p.IPsec.DPDDelay > 0 {
		return p.IPsec.DPDDelay
	}
	return 30 * time.Second
}
