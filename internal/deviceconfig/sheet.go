package deviceconfig

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// Sheet is the parameter sheet: the fields engineers collect for a site-to-site tunnel, in
// the words of whatever device the client runs. docs/kubectl-vpn.md documents it.
type Sheet struct {
	Gateway   SheetGateway    `json:"gateway"`
	Peer      SheetPeer       `json:"peer"`
	IKE       *SheetIKE       `json:"ike,omitempty"`
	ESP       *SheetESP       `json:"esp,omitempty"`
	WireGuard *SheetWireGuard `json:"wireguard,omitempty"`
	// PSK is the pre-shared key; generated when absent (IPsec).
	PSK string `json:"psk,omitempty"`
}

// SheetGateway is our side.
type SheetGateway struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	// Protocol: ipsec (default) or wireguard.
	Protocol string `json:"protocol,omitempty"`
	// Endpoint: loadBalancer, floatingIPPool:<network>, floatingIP:<address> or
	// hostNetwork:<node>[@<address>]. Empty: the gateway exists already and is not emitted.
	Endpoint string `json:"endpoint,omitempty"`
	// ServiceCIDR is the client's remote network; allocated when empty.
	ServiceCIDR string `json:"serviceCIDR,omitempty"`
	// LocalID is our IKE identity; defaults to the public address.
	LocalID string `json:"localID,omitempty"`
	// PublicAddress is informational (export); checked against a floatingIP endpoint.
	PublicAddress string `json:"publicAddress,omitempty"`
	// ListenPort of the WireGuard device.
	ListenPort int32 `json:"listenPort,omitempty"`
	// MTU of the tunnels: the WireGuard device's; for IPsec, TCP's MSS is clamped to MTU-40.
	MTU int32 `json:"mtu,omitempty"`
	// ForceEncapsulation (IPsec): NAT-T forced, ESP in UDP 4500 even without a NAT.
	ForceEncapsulation bool `json:"forceEncapsulation,omitempty"`
}

// SheetPeer is the client's device.
type SheetPeer struct {
	Name string `json:"name"`
	// Address of the client's device: an IP, a DNS name, or %any (also "any", "dynamic").
	Address string `json:"address,omitempty"`
	// ID is the device's IKE identity; defaults to the address.
	ID string `json:"id,omitempty"`
	// Networks are the client's local networks (CIDR or "address netmask").
	Networks StringList `json:"networks"`
	// RemoteNetworks are what the client configures as remote network: our service CIDR.
	RemoteNetworks StringList `json:"remoteNetworks,omitempty"`
	// PSKSecret is the Secret holding the key, "name" or "name/key" (default <peer>-psk/psk).
	PSKSecret string `json:"pskSecret,omitempty"`
	// Exposures and ReverseExposures form the peer's authorization block when given.
	Exposures        StringList `json:"exposures,omitempty"`
	ReverseExposures StringList `json:"reverseExposures,omitempty"`
}

// SheetIKE is phase 1.
type SheetIKE struct {
	Version int `json:"version,omitempty"`
	// Authentication: psk (the only method the operator supports).
	Authentication string `json:"authentication,omitempty"`
	// Mode (IKEv1): main; aggressive is refused.
	Mode string `json:"mode,omitempty"`
	// Either Proposals, or the flat algorithm lists (one set, split into an AEAD and a classic
	// proposal).
	Proposals  []SheetProposal `json:"proposals,omitempty"`
	Encryption StringList      `json:"encryption,omitempty"`
	Integrity  StringList      `json:"integrity,omitempty"`
	PRF        StringList      `json:"prf,omitempty"`
	DHGroups   StringList      `json:"dhGroups,omitempty"`
	// Lifetime is the IKE SA lifetime (rekey time): 28800, 28800s, 8h, "8 hours".
	Lifetime   string    `json:"lifetime,omitempty"`
	ReauthTime string    `json:"reauthTime,omitempty"`
	DPD        *SheetDPD `json:"dpd,omitempty"`
}

// SheetProposal is one combination of algorithms.
type SheetProposal struct {
	Encryption StringList `json:"encryption"`
	Integrity  StringList `json:"integrity,omitempty"`
	PRF        StringList `json:"prf,omitempty"`
	// DHGroups: IKE key exchange, or ESP's PFS groups.
	DHGroups StringList `json:"dhGroups,omitempty"`
}

// SheetDPD is dead peer detection.
type SheetDPD struct {
	Delay string `json:"delay,omitempty"`
	// Action: restart, clear, trap (hold), or none (DPD off).
	Action  string `json:"action,omitempty"`
	Timeout string `json:"timeout,omitempty"`
}

// SheetESP is phase 2.
type SheetESP struct {
	Mode       string          `json:"mode,omitempty"`
	Protocol   string          `json:"protocol,omitempty"`
	Proposals  []SheetProposal `json:"proposals,omitempty"`
	Encryption StringList      `json:"encryption,omitempty"`
	Integrity  StringList      `json:"integrity,omitempty"`
	// PFSGroups, or "none".
	PFSGroups         StringList `json:"pfsGroups,omitempty"`
	Lifetime          string     `json:"lifetime,omitempty"`
	LifetimeKilobytes int64      `json:"lifetimeKilobytes,omitempty"`
}

// SheetWireGuard is a WireGuard client.
type SheetWireGuard struct {
	PublicKey           string `json:"publicKey"`
	Endpoint            string `json:"endpoint,omitempty"`
	PersistentKeepalive *int32 `json:"persistentKeepalive,omitempty"`
	// PresharedKey: when true a preshared key is used (psk, or generated).
	PresharedKey bool `json:"presharedKey,omitempty"`
}

// StringList reads a YAML list, a number, or a string of items separated by ',' or ';'.
type StringList []string

func (l *StringList) UnmarshalJSON(b []byte) error {
	var any interface{}
	if err := json.Unmarshal(b, &any); err != nil {
		return err
	}
	var out []string
	var add func(v interface{}) error
	add = func(v interface{}) error {
		switch x := v.(type) {
		case nil:
		case string:
			for _, s := range strings.FieldsFunc(x, func(r rune) bool { return r == ',' || r == ';' || r == '\n' }) {
				if s = strings.TrimSpace(s); s != "" {
					out = append(out, s)
				}
			}
		case float64:
			out = append(out, strconv.FormatFloat(x, 'f', -1, 64))
		case []interface{}:
			for _, e := range x {
				if _, nested := e.([]interface{}); nested {
					return errors.New("nested lists are not allowed")
				}
				if err := add(e); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("expected a list or a string, got %T", v)
		}
		return nil
	}
	if err := add(any); err != nil {
		return err
	}
	*l = out
	return nil
}

// FieldError names the sheet field a value came from.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// FieldErrors are all the refusals of one sheet.
type FieldErrors []*FieldError

func (l FieldErrors) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// ParseSheet reads a sheet from YAML (or JSON) or, when it looks like one, a two-column CSV
// of field,value rows (field names as in the YAML, dotted: ike.encryption).
func ParseSheet(data []byte) (*Sheet, error) {
	trimmed := bytes.TrimSpace(data)
	if looksLikeCSV(trimmed) {
		return parseCSVSheet(trimmed)
	}
	var s Sheet
	if err := yaml.UnmarshalStrict(data, &s); err != nil {
		return nil, fmt.Errorf("sheet: %s", strings.TrimPrefix(err.Error(), "error unmarshaling JSON: while decoding JSON: "))
	}
	return &s, nil
}

// looksLikeCSV: the first non-comment line is "field,value" or "<dotted.field>,...".
func looksLikeCSV(b []byte) bool {
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		return csvFirst.MatchString(line)
	}
	return false
}

var csvFirst = regexp.MustCompile(`^"?(field|[a-zA-Z]+\.[a-zA-Z.]+)"?\s*,`)

// parseCSVSheet maps field,value rows onto the YAML structure. A third column (notes) is
// ignored; "#" lines are comments.
func parseCSVSheet(b []byte) (*Sheet, error) {
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			lines = append(lines, l)
		}
	}
	r := csv.NewReader(strings.NewReader(strings.Join(lines, "\n")))
	r.FieldsPerRecord = -1
	r.TrimLeadingSpace = true
	rows, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("sheet (CSV): %v", err)
	}
	root := map[string]interface{}{}
	for i, row := range rows {
		if len(row) == 0 || (len(row) == 1 && strings.TrimSpace(row[0]) == "") {
			continue
		}
		field := strings.TrimSpace(row[0])
		if i == 0 && strings.EqualFold(field, "field") {
			continue
		}
		if len(row) < 2 {
			return nil, fmt.Errorf("sheet (CSV) line %d: %s: no value", i+1, field)
		}
		value := strings.TrimSpace(row[1])
		if value == "" {
			continue
		}
		path := strings.Split(field, ".")
		m := root
		for _, k := range path[:len(path)-1] {
			next, ok := m[k].(map[string]interface{})
			if !ok {
				if _, clash := m[k]; clash {
					return nil, fmt.Errorf("sheet (CSV) line %d: %s: %s is a value, not a section", i+1, field, k)
				}
				next = map[string]interface{}{}
				m[k] = next
			}
			m = next
		}
		last := path[len(path)-1]
		if _, dup := m[last]; dup {
			return nil, fmt.Errorf("sheet (CSV) line %d: %s is given twice", i+1, field)
		}
		m[last] = csvValue(field, value)
	}
	js, err := json.Marshal(root)
	if err != nil {
		return nil, err
	}
	var s Sheet
	if err := yaml.UnmarshalStrict(js, &s); err != nil {
		return nil, fmt.Errorf("sheet (CSV): %s", strings.TrimPrefix(err.Error(), "error unmarshaling JSON: while decoding JSON: "))
	}
	return &s, nil
}

// csvValue types the numeric and boolean fields of the CSV form.
func csvValue(field, v string) interface{} {
	switch field {
	case "ike.version", "gateway.listenPort", "gateway.mtu", "esp.lifetimeKilobytes", "wireguard.persistentKeepalive":
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	case "wireguard.presharedKey":
		if b, err := strconv.ParseBool(v); err == nil {
			return b
		}
	}
	return v
}

// ImportOptions tune Import.
type ImportOptions struct {
	// Namespace when the sheet names none.
	Namespace string
	// Rand generates PSKs (crypto/rand when nil).
	Rand io.Reader
}

// Imported is what a sheet becomes.
type Imported struct {
	// Gateway is nil when the sheet has no endpoint (the gateway exists).
	Gateway *vpnv1.VPNGateway
	// Described is the gateway as the sheet describes it, emitted or not: its IKE settings
	// and service CIDR are compared with an existing gateway's.
	Described *vpnv1.VPNGateway
	Peer      *vpnv1.VPNPeer
	Secret    *corev1.Secret
	// Warnings are notes for the engineer (never containing the PSK).
	Warnings []string
}

// Import turns a sheet into manifests, refusing field by field what the operator cannot
// express; every refusal is returned at once.
func Import(s *Sheet, opts ImportOptions) (*Imported, error) {
	im := &importer{out: &Imported{}}
	im.run(s, opts)
	if len(im.errs) > 0 {
		return nil, im.errs
	}
	return im.out, nil
}

type importer struct {
	errs FieldErrors
	out  *Imported
}

func (im *importer) fail(field, format string, args ...interface{}) {
	im.errs = append(im.errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (im *importer) warn(format string, args ...interface{}) {
	im.out.Warnings = append(im.out.Warnings, fmt.Sprintf(format, args...))
}

var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	ikeIDChars   = regexp.MustCompile(`^[A-Za-z0-9@._:=,+/ -]+$`)
	wgKey        = regexp.MustCompile(`^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$`)
	wgEndpoint   = regexp.MustCompile(`^[A-Za-z0-9.-]+:[0-9]{1,5}$`)
	hostName     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

func (im *importer) run(s *Sheet, opts ImportOptions) {
	g := s.Gateway
	ns := g.Namespace
	if ns == "" {
		ns = opts.Namespace
	}
	if ns == "" {
		im.fail("gateway.namespace", "required (or pass -n)")
	} else if len(ns) > 63 || !dnsLabel.MatchString(ns) {
		im.fail("gateway.namespace", "%q is not a namespace name (a lowercase DNS label)", ns)
	}
	if g.Name == "" {
		im.fail("gateway.name", "required")
	} else if len(g.Name) > 40 || !dnsLabel.MatchString(g.Name) {
		im.fail("gateway.name", "%q is not a gateway name: a lowercase DNS label of at most 40 characters", g.Name)
	}
	pr := s.Peer
	if pr.Name == "" {
		im.fail("peer.name", "required")
	} else if len(pr.Name) > 63 || !dnsSubdomain.MatchString(pr.Name) {
		im.fail("peer.name", "%q is not a peer name: lowercase letters, digits, '-' and '.', at most 63 characters", pr.Name)
	}
	protocol := vpnv1.ProtocolIPsec
	switch strings.ToLower(g.Protocol) {
	case "", "ipsec", "ikev2", "ikev1":
	case "wireguard", "wg":
		protocol = vpnv1.ProtocolWireGuard
	default:
		im.fail("gateway.protocol", "%q is not ipsec or wireguard", g.Protocol)
	}

	gw := &vpnv1.VPNGateway{
		TypeMeta:   metav1.TypeMeta{APIVersion: vpnv1.GroupVersion.String(), Kind: "VPNGateway"},
		ObjectMeta: metav1.ObjectMeta{Name: g.Name, Namespace: ns},
		Spec:       vpnv1.VPNGatewaySpec{Protocol: protocol},
	}
	peer := &vpnv1.VPNPeer{
		TypeMeta:   metav1.TypeMeta{APIVersion: vpnv1.GroupVersion.String(), Kind: "VPNPeer"},
		ObjectMeta: metav1.ObjectMeta{Name: pr.Name, Namespace: ns},
		Spec:       vpnv1.VPNPeerSpec{GatewayRef: g.Name},
	}
	im.endpoint(g, gw)

	// service CIDR: the client's remote network
	var sc netip.Prefix
	if g.ServiceCIDR != "" {
		sc = im.serviceCIDR("gateway.serviceCIDR", g.ServiceCIDR)
	}
	switch len(pr.RemoteNetworks) {
	case 0:
	case 1:
		rn := im.serviceCIDR("peer.remoteNetworks[0]", pr.RemoteNetworks[0])
		if sc.IsValid() && rn.IsValid() && rn != sc {
			im.fail("peer.remoteNetworks[0]", "%s is not the gateway's service CIDR %s: the client's remote network is our service CIDR (snat mode)", rn, sc)
		} else if !sc.IsValid() {
			sc = rn
		}
	default:
		im.fail("peer.remoteNetworks", "%d networks given: the gateway offers one service CIDR as the client's remote network (exposures are virtual IPs inside it); internal networks are never routed to a client", len(pr.RemoteNetworks))
	}
	if sc.IsValid() {
		gw.Spec.ServiceCIDR = sc.String()
	}

	nets := im.networks("peer.networks", pr.Networks, sc)

	if len(pr.Exposures) > 0 || len(pr.ReverseExposures) > 0 {
		a := &vpnv1.Authorization{}
		for i, e := range pr.Exposures {
			if !dnsLabel.MatchString(e) || len(e) > 63 {
				im.fail(fmt.Sprintf("peer.exposures[%d]", i), "%q is not an exposure name", e)
			}
			a.Exposures = append(a.Exposures, e)
		}
		for i, e := range pr.ReverseExposures {
			if !dnsLabel.MatchString(e) || len(e) > 63 {
				im.fail(fmt.Sprintf("peer.reverseExposures[%d]", i), "%q is not a reverse exposure name", e)
			}
			a.ReverseExposures = append(a.ReverseExposures, e)
		}
		peer.Spec.Authorization = a
	}

	secretName, secretKey := pr.Name+"-psk", "psk"
	if pr.PSKSecret != "" {
		n, k, hasKey := strings.Cut(pr.PSKSecret, "/")
		if !hasKey {
			k = "psk"
		}
		if len(n) > 253 || !dnsSubdomain.MatchString(n) {
			im.fail("peer.pskSecret", "%q is not a Secret name", n)
		}
		if k == "" || !regexp.MustCompile(`^[-._a-zA-Z0-9]+$`).MatchString(k) {
			im.fail("peer.pskSecret", "%q is not a Secret key", k)
		}
		secretName, secretKey = n, k
	}

	switch protocol {
	case vpnv1.ProtocolIPsec:
		if s.WireGuard != nil {
			im.fail("wireguard", "a WireGuard section on an IPsec sheet (set gateway.protocol: wireguard)")
		}
		if g.ListenPort != 0 {
			im.fail("gateway.listenPort", "listenPort is a WireGuard setting")
		}
		if g.MTU != 0 && (g.MTU < 1280 || g.MTU > 9000) {
			im.fail("gateway.mtu", "%d is not between 1280 and 9000", g.MTU)
		}
		ip := &vpnv1.IPsecPeer{RemoteSubnets: nets, PSKSecretRef: vpnv1.SecretKeyRef{Name: secretName, Key: secretKey}}
		ip.Peer.Address = im.peerAddress(pr.Address)
		if pr.ID != "" {
			im.ikeID("peer.id", pr.ID)
			ip.Peer.ID = pr.ID
		} else if ip.Peer.Address == "%any" {
			im.fail("peer.id", "required when peer.address is %%any: a pre-shared key must prove one specific identity")
		}
		if g.LocalID != "" {
			im.ikeID("gateway.localID", g.LocalID)
			if strings.EqualFold(g.LocalID, pr.ID) {
				im.fail("peer.id", "%q is also the gateway's own identity", pr.ID)
			}
		}
		settings := im.ike(s.IKE)
		if g.LocalID != "" || g.MTU != 0 || g.ForceEncapsulation {
			if settings == nil {
				settings = &vpnv1.IPsecGatewaySettings{}
			}
			settings.LocalID, settings.MTU, settings.ForceEncapsulation = g.LocalID, g.MTU, g.ForceEncapsulation
		}
		gw.Spec.IPsec = settings
		ip.ESP = im.esp(s.ESP, settings)
		peer.Spec.IPsec = ip
		im.out.Secret = im.secret(ns, secretName, secretKey, s.PSK, opts)
	case vpnv1.ProtocolWireGuard:
		if s.IKE != nil || s.ESP != nil {
			im.fail("ike", "IKE and ESP settings on a WireGuard sheet")
		}
		if pr.Address != "" || pr.ID != "" {
			im.fail("peer.address", "a WireGuard peer has wireguard.endpoint, not an IPsec address/ID")
		}
		if g.LocalID != "" {
			im.fail("gateway.localID", "an IKE identity on a WireGuard gateway")
		}
		if g.ForceEncapsulation {
			im.fail("gateway.forceEncapsulation", "an IPsec setting on a WireGuard gateway")
		}
		w := s.WireGuard
		if w == nil {
			im.fail("wireguard.publicKey", "required for a WireGuard peer")
			break
		}
		if g.ListenPort != 0 || g.MTU != 0 {
			gw.Spec.WireGuard = &vpnv1.WireGuardGatewaySettings{ListenPort: g.ListenPort, MTU: g.MTU}
			if g.ListenPort < 0 || g.ListenPort > 65535 {
				im.fail("gateway.listenPort", "%d is not a port", g.ListenPort)
			}
			if g.MTU != 0 && (g.MTU < 1280 || g.MTU > 9000) {
				im.fail("gateway.mtu", "%d is not between 1280 and 9000", g.MTU)
			}
		}
		wp := &vpnv1.WireGuardPeer{PublicKey: w.PublicKey, Endpoint: w.Endpoint, Subnets: nets, PersistentKeepalive: w.PersistentKeepalive}
		if k, err := base64.StdEncoding.DecodeString(w.PublicKey); err != nil || len(k) != 32 || !wgKey.MatchString(w.PublicKey) {
			im.fail("wireguard.publicKey", "not a WireGuard public key (base64 of 32 bytes)")
		}
		if w.Endpoint != "" {
			port := 0
			if i := strings.LastIndexByte(w.Endpoint, ':'); i > 0 {
				port, _ = strconv.Atoi(w.Endpoint[i+1:])
			}
			if !wgEndpoint.MatchString(w.Endpoint) || port < 1 || port > 65535 {
				im.fail("wireguard.endpoint", "%q is not host:port", w.Endpoint)
			}
		}
		if k := w.PersistentKeepalive; k != nil && (*k < 0 || *k > 65535) {
			im.fail("wireguard.persistentKeepalive", "%d is not between 0 and 65535", *k)
		}
		if w.PresharedKey || s.PSK != "" {
			wp.PresharedKeySecretRef = &vpnv1.SecretKeyRef{Name: secretName, Key: secretKey}
			im.out.Secret = im.secret(ns, secretName, secretKey, s.PSK, opts)
		}
		peer.Spec.WireGuard = wp
	}
	im.out.Described = gw
	if g.Endpoint != "" {
		im.out.Gateway = gw
	} else {
		im.warn("gateway %s/%s is not part of the output (no gateway.endpoint): it must exist, with the sheet's IKE settings", ns, g.Name)
	}
	im.out.Peer = peer
}

func (im *importer) endpoint(g SheetGateway, gw *vpnv1.VPNGateway) {
	kind, arg, _ := strings.Cut(g.Endpoint, ":")
	e := &gw.Spec.Endpoint
	switch strings.ToLower(kind) {
	case "":
	case "loadbalancer":
		e.LoadBalancer = &vpnv1.LoadBalancerEndpoint{}
		if arg != "" {
			e.LoadBalancer.LoadBalancerClass = arg
		}
	case "floatingippool":
		if arg == "" || !regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`).MatchString(arg) {
			im.fail("gateway.endpoint", "floatingIPPool:<external network> expected, got %q", g.Endpoint)
		}
		e.FloatingIPPool = arg
	case "floatingip":
		a, err := netip.ParseAddr(arg)
		if err != nil || !a.Is4() {
			im.fail("gateway.endpoint", "floatingIP:<IPv4 address> expected, got %q", g.Endpoint)
		}
		e.FloatingIP = arg
		if g.PublicAddress != "" && g.PublicAddress != arg {
			im.fail("gateway.publicAddress", "%s is not the floating IP %s of gateway.endpoint", g.PublicAddress, arg)
		}
	case "hostnetwork":
		node, addr, _ := strings.Cut(arg, "@")
		nodes := strings.Split(node, ",")
		for _, n := range nodes {
			if n == "" || !hostName.MatchString(n) {
				im.fail("gateway.endpoint", "hostNetwork:<node>[,<node>...][@<address>] expected, got %q", g.Endpoint)
			}
		}
		e.HostNetwork = &vpnv1.HostNetworkEndpoint{NodeName: node}
		if len(nodes) > 1 {
			// A gateway with a standby on several nodes, the address its VIP.
			e.HostNetwork = &vpnv1.HostNetworkEndpoint{Nodes: nodes}
		}
		if addr != "" {
			if _, err := netip.ParseAddr(addr); err != nil {
				im.fail("gateway.endpoint", "%q is not an IP address", addr)
			}
			e.HostNetwork.Address = addr
		}
	default:
		im.fail("gateway.endpoint", "%q is not loadBalancer, floatingIPPool:<network>, floatingIP:<address> or hostNetwork:<node>[@<address>]", g.Endpoint)
	}
}

func (im *importer) serviceCIDR(field, s string) netip.Prefix {
	p, err := parseNetwork(s)
	if err != nil {
		im.fail(field, "%v", err)
		return netip.Prefix{}
	}
	if !model.CGNATRange.Contains(p.Addr()) || p.Bits() < 16 || p.Bits() > 28 || !p.Addr().Is4() {
		im.fail(field, "%s cannot be a service CIDR: it must lie in 100.64.0.0/10 with a prefix between /16 and /28 (the client's remote network is a range we assign; ask the client to use it)", p)
		return netip.Prefix{}
	}
	return p
}

// parseNetwork reads "10.1.0.0/16", "10.1.0.0 255.255.0.0" or "10.1.0.0/255.255.0.0".
func parseNetwork(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	addr, mask, found := strings.Cut(s, "/")
	if !found {
		addr, mask, found = strings.Cut(s, " ")
	}
	if !found {
		return netip.Prefix{}, fmt.Errorf("%q is not a network (CIDR such as 192.168.10.0/24, or address and netmask)", s)
	}
	a, err := netip.ParseAddr(strings.TrimSpace(addr))
	if err != nil || !a.Is4() {
		return netip.Prefix{}, fmt.Errorf("%q is not an IPv4 network", s)
	}
	mask = strings.TrimSpace(mask)
	bits, err := strconv.Atoi(mask)
	if err != nil {
		m, merr := netip.ParseAddr(mask)
		if merr != nil || !m.Is4() {
			return netip.Prefix{}, fmt.Errorf("%q: %q is neither a prefix length nor a netmask", s, mask)
		}
		b := m.As4()
		v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		bits = 0
		for v&0x80000000 != 0 {
			bits++
			v <<= 1
		}
		if v != 0 {
			return netip.Prefix{}, fmt.Errorf("%q: %s is not a contiguous netmask", s, mask)
		}
	}
	if bits < 0 || bits > 32 {
		return netip.Prefix{}, fmt.Errorf("%q: prefix length %d", s, bits)
	}
	p := netip.PrefixFrom(a, bits)
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q has host bits set: the network is %s", s, p.Masked())
	}
	return p, nil
}

var reservedNets = []struct {
	p    netip.Prefix
	what string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "0.0.0.0/8"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
}

func (im *importer) networks(field string, in StringList, sc netip.Prefix) []string {
	if len(in) == 0 {
		im.fail(field, "required: the client's local networks")
		return nil
	}
	if len(in) > 32 {
		im.fail(field, "%d networks, at most 32", len(in))
	}
	var out []string
	var seen []netip.Prefix
	for i, s := range in {
		f := fmt.Sprintf("%s[%d]", field, i)
		p, err := parseNetwork(s)
		if err != nil {
			im.fail(f, "%v", err)
			continue
		}
		switch {
		case p.Bits() == 0:
			im.fail(f, "0.0.0.0/0 is not a local network: a peer's networks are its LAN, never the whole Internet")
			continue
		case sc.IsValid() && p.Overlaps(sc):
			im.fail(f, "%s overlaps the gateway's service CIDR %s (the client's remote network)", p, sc)
			continue
		}
		bad := false
		for _, r := range reservedNets {
			if p.Overlaps(r.p) {
				im.fail(f, "%s covers %s addresses", p, r.what)
				bad = true
			}
		}
		for _, q := range seen {
			if p.Overlaps(q) {
				im.fail(f, "%s overlaps %s, given before", p, q)
				bad = true
			}
		}
		if bad {
			continue
		}
		seen = append(seen, p)
		out = append(out, p.String())
	}
	return out
}

func (im *importer) peerAddress(a string) string {
	switch strings.ToLower(strings.TrimSpace(a)) {
	case "":
		im.fail("peer.address", "required: the client device's public address, a DNS name, or %%any")
		return ""
	case "%any", "any", "dynamic", "0.0.0.0":
		return "%any"
	}
	if ad, err := netip.ParseAddr(a); err == nil {
		if !ad.IsGlobalUnicast() && !ad.IsPrivate() {
			im.fail("peer.address", "%s is not a unicast address", a)
		}
		return a
	}
	if len(a) > 253 || !hostName.MatchString(a) {
		im.fail("peer.address", "%q is not an IP address, a DNS name or %%any", a)
	}
	return a
}

func (im *importer) ikeID(field, id string) {
	switch {
	case strings.Contains(id, "*"):
		im.fail(field, "%q contains a wildcard: a pre-shared key must prove one specific identity", id)
	case len(id) > 255 || !ikeIDChars.MatchString(id):
		im.fail(field, "%q is not an IKE identity (an address, FQDN, user@FQDN or DN of printable characters)", id)
	}
}

// ike maps phase 1 onto the gateway's IKE settings (nil: the operator's defaults).
func (im *importer) ike(s *SheetIKE) *vpnv1.IPsecGatewaySettings {
	if s == nil {
		return nil
	}
	out := &vpnv1.IPsecGatewaySettings{}
	ike := &out.IKE
	switch s.Version {
	case 0, 2:
		ike.Version = 2
	case 1:
		ike.Version = 1
	default:
		im.fail("ike.version", "%d is not 1 or 2", s.Version)
	}
	switch normalize(s.Authentication) {
	case "", "psk", "presharedkey", "presharedkeys", "preshared", "secret":
	default:
		im.fail("ike.authentication", "%q: the operator authenticates peers with pre-shared keys only", s.Authentication)
	}
	switch normalize(s.Mode) {
	case "", "main":
	case "aggressive":
		im.fail("ike.mode", "aggressive mode exposes the PSK's hash to offline cracking; the gateway uses main mode (IKEv1) or IKEv2")
	default:
		im.fail("ike.mode", "%q is not main", s.Mode)
	}
	ike.Proposals = im.proposals("ike", IKE, s.Proposals, SheetProposal{Encryption: s.Encryption, Integrity: s.Integrity, PRF: s.PRF, DHGroups: s.DHGroups}, ike.Version)
	if d := im.duration("ike.lifetime", s.Lifetime); d != nil {
		ike.RekeyTime = d
	}
	if d := im.duration("ike.reauthTime", s.ReauthTime); d != nil {
		ike.ReauthTime = d
	}
	if dpd := s.DPD; dpd != nil {
		out := &vpnv1.DPDSettings{}
		if d := im.duration("ike.dpd.delay", dpd.Delay); d != nil {
			out.Delay = d
		}
		switch normalize(dpd.Action) {
		case "":
		case "restart", "restartbypeer", "start":
			out.Action = "restart"
		case "clear":
			out.Action = "clear"
		case "trap", "hold", "route":
			out.Action = "trap"
		case "none", "disable", "disabled", "off":
			out.Delay = &metav1.Duration{}
		default:
			im.fail("ike.dpd.action", "%q is not restart, clear, trap or none", dpd.Action)
		}
		if dpd.Timeout != "" {
			if ike.Version == 1 {
				out.Timeout = im.duration("ike.dpd.timeout", dpd.Timeout)
			} else {
				im.fail("ike.dpd.timeout", "a DPD timeout applies to IKEv1 only: strongSwan's IKEv2 declares a peer dead after its retransmissions (about 165 s) fail; leave it out")
			}
		}
		ike.DPD = out
	}
	return out
}

// esp maps phase 2 onto the peer's ESP settings.
func (im *importer) esp(s *SheetESP, gw *vpnv1.IPsecGatewaySettings) vpnv1.ESPSettings {
	var out vpnv1.ESPSettings
	if s == nil {
		return out
	}
	switch normalize(s.Mode) {
	case "", "tunnel":
	default:
		im.fail("esp.mode", "%q: the gateway runs tunnel mode only", s.Mode)
	}
	switch normalize(s.Protocol) {
	case "", "esp":
	default:
		im.fail("esp.protocol", "%q: the gateway uses ESP only", s.Protocol)
	}
	if s.LifetimeKilobytes != 0 {
		im.fail("esp.lifetimeKilobytes", "the gateway rekeys by time only; leave the volume lifetime out (or set it very high on the device)")
	}
	flat := SheetProposal{Encryption: s.Encryption, Integrity: s.Integrity, DHGroups: s.PFSGroups}
	if len(s.PFSGroups) == 1 && isNone(s.PFSGroups[0]) {
		flat.DHGroups = nil
	} else if len(s.PFSGroups) == 0 && len(s.Encryption) > 0 {
		im.warn("esp.pfsGroups not given: no PFS (write pfsGroups: none to say so)")
	}
	version := int32(2)
	if gw != nil && gw.IKE.Version == 1 {
		version = 1
	}
	out.Proposals = im.proposals("esp", ESP, s.Proposals, flat, version)
	if d := im.duration("esp.lifetime", s.Lifetime); d != nil {
		out.RekeyTime = d
	}
	return out
}

func isNone(s string) bool {
	switch normalize(s) {
	case "none", "no", "off", "disabled", "disable", "nopfs", "0":
		return true
	}
	return false
}

// proposals builds strongSwan proposals from explicit combinations or the flat lists (split
// into an AEAD and a classic proposal, as strongSwan needs).
func (im *importer) proposals(section string, ctx Context, explicit []SheetProposal, flat SheetProposal, version int32) []string {
	hasFlat := len(flat.Encryption)+len(flat.Integrity)+len(flat.PRF)+len(flat.DHGroups) > 0
	if len(explicit) > 0 && hasFlat {
		im.fail(section+".proposals", "give either proposals or the flat algorithm lists, not both")
		return nil
	}
	var out []string
	if len(explicit) > 0 {
		for i, sp := range explicit {
			out = append(out, im.proposal(fmt.Sprintf("%s.proposals[%d].", section, i), ctx, sp, version)...)
		}
		return out
	}
	if !hasFlat {
		return nil
	}
	return im.proposal(section+".", ctx, flat, version)
}

func (im *importer) proposal(prefix string, ctx Context, sp SheetProposal, version int32) []string {
	dhField := "dhGroups"
	if ctx == ESP && !strings.Contains(prefix, "proposals[") {
		dhField = "pfsGroups"
	}
	look := func(field string, k Kind, words StringList) []*Algorithm {
		var out []*Algorithm
		for i, w := range words {
			if k == DH && isNone(w) && ctx == ESP {
				continue
			}
			a, err := LookupAlias(k, w)
			if err != nil {
				im.fail(fmt.Sprintf("%s%s[%d]", prefix, field, i), "%v", err)
				continue
			}
			out = appendUnique(out, a)
		}
		return out
	}
	enc := look("encryption", Encryption, sp.Encryption)
	integ := look("integrity", Integrity, sp.Integrity)
	var prf []*Algorithm
	if ctx == IKE {
		prf = look("prf", PRF, sp.PRF)
	} else if len(sp.PRF) > 0 {
		im.fail(prefix+"prf", "a PRF belongs to phase 1 (ike), not ESP")
	}
	dh := look(dhField, DH, sp.DHGroups)
	if len(sp.Encryption) == 0 {
		im.fail(prefix+"encryption", "required")
		return nil
	}
	if ctx == IKE && len(sp.DHGroups) == 0 {
		im.fail(prefix+dhField, "required: the DH group(s) of phase 1")
	}
	var aead, classic []*Algorithm
	for _, a := range enc {
		if a.AEAD {
			aead = append(aead, a)
		} else {
			classic = append(classic, a)
		}
	}
	var out []string
	if len(aead) > 0 {
		if ctx == IKE && version == 1 {
			im.fail(prefix+"encryption", "AES-GCM is not available for an IKEv1 SA (use IKEv2, or CBC with an integrity algorithm)")
		}
		p := Proposal{Enc: aead, DH: dh}
		if ctx == IKE {
			p.PRF = prf
			if len(p.PRF) == 0 {
				// the integrity column of a GCM sheet is the PRF (pfSense, PAN-OS, OPNsense)
				for _, i := range integ {
					p.PRF = appendUnique(p.PRF, byName["prf"+i.Name])
				}
			}
			if len(p.PRF) == 0 {
				im.fail(prefix+"prf", "required with AEAD encryption (%s): give the PRF (or the hash as integrity)", aead[0].Name)
			}
		} else if len(classic) == 0 && len(integ) > 0 {
			im.warn("%sintegrity ignored: %s authenticates itself", prefix, aead[0].Name)
		}
		out = append(out, p.String(ctx))
	}
	if len(classic) > 0 {
		p := Proposal{Enc: classic, Integ: integ, DH: dh}
		if len(integ) == 0 {
			im.fail(prefix+"integrity", "required with %s (CBC): give an integrity algorithm such as SHA2-256", classic[0].Name)
		}
		if ctx == IKE {
			p.PRF = prf
			if len(p.PRF) == 0 {
				for _, i := range integ {
					p.PRF = appendUnique(p.PRF, byName["prf"+i.Name])
				}
			}
		}
		out = append(out, p.String(ctx))
	}
	return out
}

var durationWords = regexp.MustCompile(`^([0-9]+)\s*(s|sec|secs|second|seconds|m|min|mins|minute|minutes|h|hr|hrs|hour|hours|d|day|days)$`)

// duration reads 28800, 28800s, 8h, 4h30m, "8 hours".
func (im *importer) duration(field, s string) *metav1.Duration {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return nil
	}
	var d time.Duration
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		d = time.Duration(n) * time.Second
	} else if m := durationWords.FindStringSubmatch(s); m != nil {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		unit := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour}[m[2][0]]
		d = time.Duration(n) * unit
	} else if pd, err := time.ParseDuration(s); err == nil {
		d = pd
	} else {
		im.fail(field, "%q is not a duration (28800, 28800s, 8h, 4h30m, \"8 hours\")", s)
		return nil
	}
	if d < 0 || d > 8760*time.Hour {
		im.fail(field, "%s is not between 0 and 8760h", d)
		return nil
	}
	if d%time.Second != 0 {
		im.fail(field, "%s: whole seconds only", d)
		return nil
	}
	return &metav1.Duration{Duration: d}
}

const pskAlphabet = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789"

func (im *importer) secret(ns, name, key, value string, opts ImportOptions) *corev1.Secret {
	switch {
	case value == "":
		r := opts.Rand
		if r == nil {
			r = rand.Reader
		}
		var b strings.Builder
		for b.Len() < 40 {
			n, err := rand.Int(r, big.NewInt(int64(len(pskAlphabet))))
			if err != nil {
				im.fail("psk", "generating a key: %v", err)
				return nil
			}
			b.WriteByte(pskAlphabet[n.Int64()])
		}
		value = b.String()
		im.warn("psk not given: a random 40-character key was generated into Secret %s/%s (hand it to the client with kubectl vpn peer-config --include-secrets)", ns, name)
	case len(value) < 8:
		im.fail("psk", "%d characters: at least 8 (20 or more recommended)", len(value))
	case len(value) > 255:
		im.fail("psk", "%d characters: at most 255", len(value))
	default:
		for _, r := range value {
			if r < 0x20 || r > 0x7e {
				im.fail("psk", "only printable ASCII characters (devices differ on anything else)")
				break
			}
		}
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{key: []byte(value)},
	}
}
