package strongswan

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/strongswan/swanconf"
)

// Actions and settings chosen for every connection; see actionsFor for the reasoning.
const (
	anyAddress = "%any"

	// keyingTriesForever: a failed initiation (peer unreachable, rebooting) is retried with new
	// retransmission sequences until it succeeds or fails permanently (e.g. AUTH_FAILED).
	keyingTriesForever = 0
	// uniqueReplace: a new IKE_SA with the same identities replaces the old one, so a peer that
	// restarted and initiates afresh never leaves a stale SA (and its policies) behind.
	uniqueReplace = "replace"
)

// Errors a caller may test for.
var (
	ErrNotIPsec = errors.New("not an ipsec gateway")
)

// FieldError names the model field a value came from and why it cannot be rendered.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field string, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

// Render builds the charon configuration of an ipsec gateway: one connection per peer with an
// IPsec section (peers of the other protocol are in the model but have none and are skipped;
// dark peers are rendered — a peer without grants still has its tunnel, the nftables ruleset
// keeps it from reaching anything). It returns an error naming the field for anything that
// cannot be written safely, never a partial configuration.
func Render(gw *model.Gateway, opts Options) (*Config, error) {
	if gw == nil {
		return nil, errors.New("no gateway")
	}
	if gw.Protocol != model.ProtocolIPsec {
		return nil, fmt.Errorf("gateway %s/%s: protocol %q: %w", gw.Namespace, gw.Name, gw.Protocol, ErrNotIPsec)
	}
	if gw.IPsec == nil {
		return nil, fieldErr("ipsec", "missing IKE settings")
	}
	switch gw.Mode {
	case model.ModeSNAT, "":
	default:
		return nil, fieldErr("mode", "mode %q is not implemented by the strongSwan renderer (snat only)", gw.Mode)
	}
	if err := swanconf.CheckComment(gw.Namespace + "/" + gw.Name); err != nil {
		return nil, fieldErr("name", "%v", err)
	}
	if !gw.ServiceCIDR.IsValid() || !gw.ServiceCIDR.Addr().Is4() || gw.ServiceCIDR.Masked() != gw.ServiceCIDR {
		return nil, fieldErr("serviceCIDR", "%q is not an IPv4 network address", gw.ServiceCIDR)
	}

	gwIKE, err := ikeValues("ipsec", gw.IPsec.IKESettings())
	if err != nil {
		return nil, err
	}
	localID, localIDField := gw.IPsec.LocalID, "ipsec.localID"
	if localID == "" {
		localID, localIDField = gw.PublicAddress, "publicAddress"
	}
	if localID != "" {
		if err := checkID(localID); err != nil {
			return nil, &FieldError{Field: localIDField, Err: err}
		}
	}

	out := &Config{Gateway: gw.Namespace + "/" + gw.Name}
	seen := map[string]string{}
	ids := map[string]string{}
	var installed []model.PeerPrefix // every remote_ts, for the one-source-one-tunnel check
	for _, p := range gw.Peers {
		// A peer without a tunnel (no subnet left after the model withheld those overlapping an
		// older peer's or the cluster's ranges, a duplicate identity) gets no connection at all.
		if p.IPsec == nil || !p.HasTunnel() {
			continue
		}
		pf := fmt.Sprintf("peers[%q]", p.Name)
		name, err := swanconf.ConnectionName(p.Name)
		if err != nil {
			return nil, &FieldError{Field: pf + ".name", Err: err}
		}
		if other, dup := seen[name]; dup {
			return nil, fieldErr(pf+".name", "connection name %q is also that of peer %q", name, other)
		}
		seen[name] = p.Name
		ip := p.IPsec

		if err := checkAddress(ip.RemoteAddress); err != nil {
			return nil, &FieldError{Field: pf + ".ipsec.remoteAddress", Err: err}
		}
		if err := checkID(ip.RemoteID); err != nil {
			return nil, &FieldError{Field: pf + ".ipsec.remoteID", Err: err}
		}
		if err := checkList(pf+".ipsec.espProposals", ip.ESPProposals, checkProposal); err != nil {
			return nil, err
		}
		childRekey, err := formatDuration(ip.RekeyTime)
		if err != nil {
			return nil, &FieldError{Field: pf + ".ipsec.rekeyTime", Err: err}
		}
		remoteTS, err := trafficSelectors(p.SourceCIDRs)
		if err != nil {
			return nil, &FieldError{Field: pf + ".sourceCIDRs", Err: err}
		}
		for _, c := range p.SourceCIDRs {
			installed = append(installed, model.PeerPrefix{Peer: p.Name, Prefix: c})
		}
		// A PSK proves one identity: no two connections may share a remote ID, or the key of
		// one would authenticate the other's.
		if other, dup := ids[model.NormalizeID(ip.RemoteID)]; dup {
			return nil, fieldErr(pf+".ipsec.remoteID", "%q is also the remote ID of peer %q", ip.RemoteID, other)
		}
		ids[model.NormalizeID(ip.RemoteID)] = p.Name
		if err := checkSecretRef(ip.PSK); err != nil {
			return nil, &FieldError{Field: pf + ".ipsec.psk", Err: err}
		}

		// The peer's own IKE settings, or the gateway's.
		ike := gwIKE
		if ip.IKE != nil {
			if ike, err = ikeValues(pf+".ipsec.ike", *ip.IKE); err != nil {
				return nil, err
			}
		}
		start, dpd, closeAction := actionsFor(ip.RemoteAddress, ike.DPDAction)
		// Kernel ESP: fixed reqids, the peer's own and, for a peer with several subnets, one
		// per subnet (model.IPsecPeer.SubnetReqids). A model without subnet reqids (from an
		// operator before them) gets the one child its reqid can tell apart.
		var reqid string
		var subnetReqids []string
		if opts.Reqids {
			if err := model.ReqidError(p); err != nil {
				return nil, &FieldError{Field: pf + ".ipsec.reqid", Err: err}
			}
			reqid = strconv.FormatUint(uint64(ip.Reqid), 10)
			for _, r := range ip.SubnetReqids {
				subnetReqids = append(subnetReqids, strconv.FormatUint(uint64(r), 10))
			}
		}
		// Several subnets, and the reqids to tell them apart when the kernel needs them.
		perSubnet := len(remoteTS) > 1 && (!opts.Reqids || len(subnetReqids) == len(remoteTS))
		child := func(ts []string, reqid, start string) Child {
			return Child{
				Mode:         "tunnel",
				LocalTS:      []string{gw.ServiceCIDR.String()},
				RemoteTS:     ts,
				ESPProposals: slices.Clone(ip.ESPProposals),
				RekeyTime:    childRekey,
				StartAction:  start,
				DPDAction:    dpd,
				CloseAction:  closeAction,
				Reqid:        reqid,
			}
		}
		subnetReqid := func(i int) string {
			if i < len(subnetReqids) {
				return subnetReqids[i]
			}
			return reqid
		}
		children := map[string]Child{}
		perSubnetChildren := func(start string) {
			for i, ts := range remoteTS {
				children[name+"~"+strconv.Itoa(i+1)] = child([]string{ts}, subnetReqid(i), start)
			}
		}
		switch {
		case ike.IKEVersion == 1 && len(remoteTS) > 1, perSubnet && start != startNone:
			// One child per subnet, each started by the gateway: IKEv1 negotiates one subnet
			// per CHILD_SA; and a site that negotiates a CHILD_SA per subnet (FortiGate, PAN-OS,
			// MikroTik) gets children that match them exactly, while a site that proposes its
			// subnets together gets them narrowed to one and the gateway's own CHILD_SAs for the
			// rest. In kernel ESP every subnet's SAs then have that subnet's reqid, whoever
			// started them: the kernel sends through the newest SA of a reqid, so one reqid for
			// several subnets' SAs would send each subnet's traffic through another's.
			perSubnetChildren(start)
		case perSubnet:
			// A site at %any starts what it has: one child for all the subnets, as it proposes
			// them together, and one per subnet, for a site with one CHILD_SA per subnet (charon
			// gives a proposal the first of the children matching it best: ChildNames puts the
			// narrow ones first).
			children[name] = child(remoteTS, reqid, start)
			perSubnetChildren(startNone)
		default:
			children[name] = child(remoteTS, reqid, start)
		}

		conn := Connection{
			Name: name,
			Peer: p.Name,
			IKE: IKE{
				Version:     int(ike.IKEVersion),
				LocalAddrs:  []string{localAddress(gw)},
				RemoteAddrs: []string{ip.RemoteAddress},
				Proposals:   slices.Clone(ike.IKEProposals),
				Mobike:      false,
				SendCertReq: false,
				DPDDelay:    ike.dpdDelay,
				DPDTimeout:  ike.dpdTimeout,
				RekeyTime:   ike.rekey,
				ReauthTime:  ike.reauth,
				Unique:      uniqueReplace,
				KeyingTries: keyingTriesForever,
				Local:       Auth{Auth: "psk", ID: localID},
				Remote:      Auth{Auth: "psk", ID: ip.RemoteID},
				Children:    children,
			},
		}
		if opts.ForceEncap {
			yes := true
			conn.IKE.Encap = &yes
		}
		out.Connections = append(out.Connections, conn)

		// The key is owned by the remote ID alone. strongSwan hands out a shared key when
		// either of its owners matches either end, so a key also owned by our own identity
		// would verify any peer's claim to any identity, with any peer's key.
		out.SharedKeys = append(out.SharedKeys, SharedKey{
			ID:         "ike-" + name,
			Owners:     []string{ip.RemoteID},
			Secret:     ip.PSK,
			Connection: name,
		})
	}
	// One source, one tunnel: the model keeps peers' subnets disjoint; should that ever fail,
	// nothing is rendered rather than two tunnels claiming one source.
	if a, b, overlap := model.FirstOverlap(installed); overlap {
		return nil, fieldErr(fmt.Sprintf("peers[%q].sourceCIDRs", b.Peer), "%s overlaps %s of peer %q: two tunnels would carry the same source", b.Prefix, a.Prefix, a.Peer)
	}
	return out, nil
}

// localAddress is what charon binds the gateway's IKE SAs to: the uplink's address when the
// tunnels use a second NIC (the cloud translates the floating IP to that address only, and
// its packets leave through that NIC), the VIP of a host-network gateway with a standby (the
// sites accept IKE from that address only, and it is on the active pod's node alone), any
// address otherwise.
func localAddress(gw *model.Gateway) string {
	if gw.Uplink != nil && gw.Uplink.Address.IsValid() {
		return gw.Uplink.Address.Addr().String()
	}
	if gw.Endpoint.MovingAddress() {
		return gw.Endpoint.HostAddress.String()
	}
	return anyAddress
}

// ikeSettings are an IKE SA's settings checked and in swanctl's words.
type ikeSettings struct {
	model.IKE
	dpdDelay, dpdTimeout, rekey, reauth string
}

// ikeValues checks an IKE SA's settings (the gateway's, or a peer's own: field names them).
func ikeValues(field string, ike model.IKE) (ikeSettings, error) {
	out := ikeSettings{IKE: ike}
	if ike.IKEVersion != 1 && ike.IKEVersion != 2 {
		return out, fieldErr(field+".ikeVersion", "IKE version %d is not 1 or 2", ike.IKEVersion)
	}
	if err := checkList(field+".ikeProposals", ike.IKEProposals, checkProposal); err != nil {
		return out, err
	}
	var err error
	if out.dpdDelay, err = formatDuration(ike.DPDDelay); err != nil {
		return out, &FieldError{Field: field + ".dpdDelay", Err: err}
	}
	if ike.DPDTimeout != 0 {
		if ike.IKEVersion != 1 {
			return out, fieldErr(field+".dpdTimeout", "a DPD timeout applies to IKEv1 only")
		}
		if out.dpdTimeout, err = formatDuration(ike.DPDTimeout); err != nil {
			return out, &FieldError{Field: field + ".dpdTimeout", Err: err}
		}
	}
	if out.rekey, err = formatDuration(ike.RekeyTime); err != nil {
		return out, &FieldError{Field: field + ".rekeyTime", Err: err}
	}
	if out.reauth, err = formatDuration(ike.ReauthTime); err != nil {
		return out, &FieldError{Field: field + ".reauthTime", Err: err}
	}
	switch ike.DPDAction {
	case "restart", "clear", "trap":
	default:
		return out, fieldErr(field+".dpdAction", "%q is not one of restart, clear, trap", ike.DPDAction)
	}
	return out, nil
}

// startNone is a child's start_action when only the site starts it.
const startNone = "none"

// actionsFor picks the CHILD_SA actions that make the tunnel heal by itself after the peer
// restarts, crashes or deletes the SA, without an operator or the agent stepping in:
//
//   - start_action "trap|start": initiate as soon as the configuration is loaded (the tunnel
//     is up before any traffic, so Connected means something even for idle tunnels), and keep
//     trap policies installed, so that whatever ends the SA in a way no other action covers
//     (a failed rekey, a negotiation error, a peer that came back while we had given up) is
//     re-negotiated by the next packet in either direction. strongSwan recommends trap
//     policies as the only reliable way to re-create failed CHILD_SAs. Needs strongSwan
//     >= 5.9.6.
//   - dpd_action from the gateway (default "restart"): when the peer stops answering (crash,
//     reboot without a DELETE) we re-initiate at once and, with keyingtries=0, keep retrying
//     until it is back.
//   - close_action "start": when the peer deletes the CHILD_SA (graceful restart, its own
//     rekey failure) we re-initiate immediately instead of waiting for traffic to hit the trap.
//     "none" would also heal (through the trap) but leaves an idle tunnel down and its peer
//     reported disconnected. A peer that really wants the tunnel gone answers with a permanent
//     error, which ends the retries.
//
// A peer whose address is %any cannot be initiated to (there is nowhere to send the IKE_SA_INIT):
// such a connection is responder-only, so start_action and close_action are "none" and
// dpd_action "clear" (restart or trap would try to initiate to %any); the peer heals it by
// initiating again, and unique=replace drops its stale SA when it does.
func actionsFor(remoteAddress, dpdAction string) (start, dpd, closeAction string) {
	if remoteAddress == anyAddress {
		return startNone, "clear", "none"
	}
	return "trap|start", dpdAction, "start"
}

var (
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	// dnsName is a host name as remote_addrs accepts it (letters, digits, hyphens, dots).
	dnsName = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*\.?$`)
	// proposal is strongSwan's algorithm notation: keywords joined by '-'.
	proposal = regexp.MustCompile(`^[A-Za-z0-9_.]+(-[A-Za-z0-9_.]+)*$`)
	// k8sKey is a Secret data key.
	k8sKey = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)
)

// checkAddress accepts %any, an IP address or a DNS name.
func checkAddress(a string) error {
	if a == anyAddress {
		return nil
	}
	if _, err := netip.ParseAddr(a); err == nil {
		return nil
	}
	if len(a) <= 253 && dnsName.MatchString(a) {
		return nil
	}
	return fmt.Errorf("%q is not an IP address, DNS name or %%any", a)
}

// checkID accepts any identity of printable ASCII (DNs with spaces, commas, '=', quotes
// included: they are quoted and escaped), at most 255 bytes. charon refuses anything else in a
// VICI id value (it must be printable), so there is no point in writing it.
func checkID(id string) error {
	if id == "" {
		return errors.New("empty IKE identity")
	}
	if len(id) > 255 {
		return fmt.Errorf("IKE identity is %d bytes long, at most 255 allowed", len(id))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("IKE identity %q: byte %#02x is not printable ASCII", id, c)
		}
	}
	if err := swanconf.CheckValue(id); err != nil {
		return fmt.Errorf("IKE identity %q: %w", id, err)
	}
	return nil
}

func checkProposal(p string) error {
	if len(p) > 255 || !proposal.MatchString(p) {
		return fmt.Errorf("%q is not a proposal in strongSwan notation", p)
	}
	return nil
}

func checkList(field string, items []string, check func(string) error) error {
	if len(items) == 0 {
		return fieldErr(field, "empty")
	}
	for i, it := range items {
		if err := check(it); err != nil {
			return &FieldError{Field: fmt.Sprintf("%s[%d]", field, i), Err: err}
		}
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

func trafficSelectors(cidrs []netip.Prefix) ([]string, error) {
	if len(cidrs) == 0 {
		return nil, errors.New("no subnets")
	}
	out := make([]string, len(cidrs))
	for i, c := range cidrs {
		if !c.IsValid() || c.Masked() != c {
			return nil, fmt.Errorf("[%d] %q is not a network address", i, c)
		}
		out[i] = c.String()
	}
	return out, nil
}

// maxDuration bounds every time value (the API allows at most 8760h).
const maxDuration = 10 * 8760 * time.Hour

// formatDuration writes d in swanctl's time notation with the largest unit that represents it
// exactly (30s, 1h, 4h -> "4h", 90m -> "90m"); fractions of a second round up (a DPD delay of
// 500ms becomes 1s, never 0, which would disable it).
func formatDuration(d time.Duration) (string, error) {
	if d < 0 {
		return "", fmt.Errorf("duration %s is negative", d)
	}
	if d > maxDuration {
		return "", fmt.Errorf("duration %s is longer than %s", d, maxDuration)
	}
	s := int64((d + time.Second - 1) / time.Second)
	switch {
	case s == 0:
		return "0s", nil
	case s%86400 == 0:
		return strconv.FormatInt(s/86400, 10) + "d", nil
	case s%3600 == 0:
		return strconv.FormatInt(s/3600, 10) + "h", nil
	case s%60 == 0:
		return strconv.FormatInt(s/60, 10) + "m", nil
	}
	return strconv.FormatInt(s, 10) + "s", nil
}
