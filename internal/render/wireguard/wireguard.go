// Package wireguard renders a validated model.Gateway (protocol wireguard) into the WireGuard
// device configuration the gateway agent applies (through wgctrl, kernel or userspace) and a
// readable wg-quick-like text for the gateway's ConfigMap. It is pure: no I/O, and no key
// material passes through it — the private key and pre-shared keys are Secret references the
// agent resolves.
package wireguard

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// Config is the device and its peers.
type Config struct {
	// Gateway is "<namespace>/<name>", used in the text header only.
	Gateway   string    `json:"gateway"`
	Interface Interface `json:"interface"`
	// Peers in the model's order (by name), one per peer with a WireGuard section.
	Peers []Peer `json:"peers,omitempty"`
}

// Interface is the device itself.
type Interface struct {
	ListenPort uint16 `json:"listenPort"`
	// Address is the gateway's address in the service CIDR with the CIDR's prefix length.
	Address netip.Prefix `json:"address"`
	MTU     int32        `json:"mtu"`
	// PrivateKey is where the device's private key is (base64 in the Secret's data).
	PrivateKey model.SecretKeyRef `json:"privateKey"`
	// FirewallMark marks the device's packets (model.UplinkMark when the gateway has an
	// uplink: they are routed out of it); 0 leaves them unmarked.
	FirewallMark uint32 `json:"firewallMark,omitempty"`
}

// Peer is one remote device.
type Peer struct {
	// Name is the model peer's name.
	Name string `json:"name"`
	// PublicKey is base64 (standard encoding) of the 32-byte key.
	PublicKey string `json:"publicKey"`
	// AllowedIPs are the peer's subnets, except any a dark peer shares with an authorized one
	// (see Render).
	AllowedIPs []netip.Prefix `json:"allowedIPs,omitempty"`
	// WithheldIPs are subnets of this (dark) peer that overlap an older peer's or the
	// cluster's ranges (model.Peer.WithheldCIDRs) and are
	// therefore not routed to it.
	WithheldIPs []netip.Prefix `json:"withheldIPs,omitempty"`
	// Endpoint is "host:port" (host an IP address or DNS name the agent resolves), or empty
	// when the peer only connects to us.
	Endpoint string `json:"endpoint,omitempty"`
	// PersistentKeepalive in seconds; 0 is off.
	PersistentKeepalive uint16 `json:"persistentKeepalive,omitempty"`
	// PresharedKey is where the optional pre-shared key is.
	PresharedKey *model.SecretKeyRef `json:"presharedKey,omitempty"`
}

// PublicKeyBytes decodes PublicKey (for wgtypes.Key).
func (p Peer) PublicKeyBytes() ([32]byte, error) {
	return decodeKey(p.PublicKey)
}

// KeepaliveInterval is PersistentKeepalive as a duration (for
// wgtypes.PeerConfig.PersistentKeepaliveInterval; 0 disables).
func (p Peer) KeepaliveInterval() time.Duration {
	return time.Duration(p.PersistentKeepalive) * time.Second
}

// AllowedIPNets converts AllowedIPs for wgtypes.PeerConfig.AllowedIPs.
func (p Peer) AllowedIPNets() []net.IPNet {
	out := make([]net.IPNet, len(p.AllowedIPs))
	for i, a := range p.AllowedIPs {
		out[i] = net.IPNet{IP: net.IP(a.Addr().AsSlice()), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())}
	}
	return out
}

// EndpointHostPort splits Endpoint; ok is false when there is none. An IP host can be used
// directly; a DNS name is for the agent to resolve.
func (p Peer) EndpointHostPort() (host string, port uint16, ok bool) {
	if p.Endpoint == "" {
		return "", 0, false
	}
	h, ps, err := net.SplitHostPort(p.Endpoint)
	if err != nil {
		return "", 0, false
	}
	n, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return "", 0, false
	}
	return h, uint16(n), true
}

// ErrNotWireGuard is returned for a gateway of another protocol.
var ErrNotWireGuard = errors.New("not a wireguard gateway")

// FieldError names the model field a value came from and why it cannot be rendered.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// Render builds the device configuration of a wireguard gateway: every peer with a WireGuard
// section and a tunnel (dark peers included — their tunnel comes up, the ruleset keeps them
// from reaching anything). Allowed IPs decide which sources a peer may send from and where
// WireGuard routes return traffic, so no two peers' allowed IPs may overlap: the model
// withholds every subnet overlapping an older peer's (one source, one tunnel), and the
// renderer refuses anything that would still overlap. Anything that cannot be written safely
// is an error naming the field.
func Render(gw *model.Gateway) (*Config, error) {
	if gw == nil {
		return nil, errors.New("no gateway")
	}
	if gw.Protocol != model.ProtocolWireGuard {
		return nil, fmt.Errorf("gateway %s/%s: protocol %q: %w", gw.Namespace, gw.Name, gw.Protocol, ErrNotWireGuard)
	}
	if gw.WireGuard == nil {
		return nil, &FieldError{Field: "wireguard", Err: errors.New("missing device settings")}
	}
	switch gw.Mode {
	case model.ModeSNAT, "":
	default:
		return nil, &FieldError{Field: "mode", Err: fmt.Errorf("mode %q is not implemented by the WireGuard renderer (snat only)", gw.Mode)}
	}
	if err := checkText(gw.Namespace + "/" + gw.Name); err != nil {
		return nil, &FieldError{Field: "name", Err: err}
	}
	wg := gw.WireGuard
	if !gw.ServiceCIDR.IsValid() || !gw.ServiceCIDR.Addr().Is4() {
		return nil, &FieldError{Field: "serviceCIDR", Err: fmt.Errorf("%q is not an IPv4 CIDR", gw.ServiceCIDR)}
	}
	if !gw.LocalAddress.IsValid() || !gw.ServiceCIDR.Contains(gw.LocalAddress) {
		return nil, &FieldError{Field: "localAddress", Err: fmt.Errorf("%s is not inside the service CIDR %s", gw.LocalAddress, gw.ServiceCIDR)}
	}
	if wg.ListenPort == 0 {
		return nil, &FieldError{Field: "wireguard.listenPort", Err: errors.New("port 0")}
	}
	if wg.MTU < 576 || wg.MTU > 65535 {
		return nil, &FieldError{Field: "wireguard.mtu", Err: fmt.Errorf("MTU %d is out of range", wg.MTU)}
	}
	if err := checkSecretRef(wg.PrivateKey); err != nil {
		return nil, &FieldError{Field: "wireguard.privateKey", Err: err}
	}
	out := &Config{
		Gateway: gw.Namespace + "/" + gw.Name,
		Interface: Interface{
			ListenPort: wg.ListenPort,
			Address:    netip.PrefixFrom(gw.LocalAddress, gw.ServiceCIDR.Bits()),
			MTU:        wg.MTU,
			PrivateKey: wg.PrivateKey,
		},
	}
	if gw.Uplink != nil {
		out.Interface.FirewallMark = model.UplinkMark
	}

	keys := map[string]string{}
	var installed []model.PeerPrefix // every allowed IP, for the one-source-one-tunnel check
	for _, p := range gw.Peers {
		if p.WireGuard == nil || !p.HasTunnel() {
			continue
		}
		pf := fmt.Sprintf("peers[%q]", p.Name)
		if err := checkText(p.Name); err != nil || p.Name == "" {
			if err == nil {
				err = errors.New("empty name")
			}
			return nil, &FieldError{Field: pf + ".name", Err: err}
		}
		w := p.WireGuard
		if _, err := decodeKey(w.PublicKey); err != nil {
			return nil, &FieldError{Field: pf + ".wireguard.publicKey", Err: err}
		}
		if other, dup := keys[w.PublicKey]; dup {
			return nil, &FieldError{Field: pf + ".wireguard.publicKey", Err: fmt.Errorf("same public key as peer %q", other)}
		}
		keys[w.PublicKey] = p.Name
		if w.Endpoint != "" {
			if err := checkEndpoint(w.Endpoint); err != nil {
				return nil, &FieldError{Field: pf + ".wireguard.endpoint", Err: err}
			}
		}
		if w.PresharedKey != nil {
			if err := checkSecretRef(*w.PresharedKey); err != nil {
				return nil, &FieldError{Field: pf + ".wireguard.presharedKey", Err: err}
			}
		}
		if len(p.SourceCIDRs) == 0 {
			return nil, &FieldError{Field: pf + ".sourceCIDRs", Err: errors.New("no subnets")}
		}
		peer := Peer{
			Name:                p.Name,
			PublicKey:           w.PublicKey,
			Endpoint:            w.Endpoint,
			PersistentKeepalive: w.PersistentKeepalive,
		}
		if w.PresharedKey != nil {
			r := *w.PresharedKey
			peer.PresharedKey = &r
		}
		for i, c := range p.SourceCIDRs {
			if !c.IsValid() || c.Masked() != c {
				return nil, &FieldError{Field: fmt.Sprintf("%s.sourceCIDRs[%d]", pf, i), Err: fmt.Errorf("%q is not a network address", c)}
			}
			peer.AllowedIPs = append(peer.AllowedIPs, c)
			installed = append(installed, model.PeerPrefix{Peer: p.Name, Prefix: c})
		}
		peer.WithheldIPs = slices.Clone(p.WithheldCIDRs)
		out.Peers = append(out.Peers, peer)
	}
	if a, b, overlap := model.FirstOverlap(installed); overlap {
		return nil, &FieldError{Field: fmt.Sprintf("peers[%q].sourceCIDRs", b.Peer),
			Err: fmt.Errorf("%s overlaps %s of peer %q: two peers would carry the same source", b.Prefix, a.Prefix, a.Peer)}
	}
	return out, nil
}

func decodeKey(s string) ([32]byte, error) {
	var k [32]byte
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != 32 || len(s) != 44 {
		return k, fmt.Errorf("%q is not a base64-encoded 32-byte WireGuard key", s)
	}
	copy(k[:], b)
	return k, nil
}

var (
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	k8sKey       = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)
	hostName     = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*$`)
)

// checkEndpoint accepts host:port with an IPv4 address, a bracketed IPv6 address or a DNS name
// and a port between 1 and 65535.
func checkEndpoint(e string) error {
	h, ps, err := net.SplitHostPort(e)
	if err != nil {
		return fmt.Errorf("%q is not host:port", e)
	}
	n, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || n == 0 || strconv.FormatUint(n, 10) != ps {
		return fmt.Errorf("%q: port %q is not between 1 and 65535", e, ps)
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return fmt.Errorf("%q: zoned address", e)
		}
		if a.Is6() != strings.HasPrefix(e, "[") {
			return fmt.Errorf("%q is not host:port", e)
		}
		return nil
	}
	if len(h) > 253 || !hostName.MatchString(h) {
		return fmt.Errorf("%q: host %q is not an IP address or DNS name", e, h)
	}
	return nil
}

func checkSecretRef(r model.SecretKeyRef) error {
	if len(r.Name) > 253 || !dnsSubdomain.MatchString(r.Name) {
		return fmt.Errorf("Secret name %q is not a Kubernetes object name", r.Name)
	}
	if len(r.Key) > 253 || !k8sKey.MatchString(r.Key) {
		return fmt.Errorf("Secret key %q is not a valid data key", r.Key)
	}
	return nil
}

// checkText accepts what can appear in a comment line: valid UTF-8 without control characters.
func checkText(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return fmt.Errorf("contains the control character %U", r)
		}
	}
	return nil
}
