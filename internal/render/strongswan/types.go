// Package strongswan renders a validated model.Gateway (protocol ipsec) into what the gateway
// agent loads into charon: one VICI load-conn per IPsec peer, the descriptors of the pre-shared
// keys it loads with load-shared from Kubernetes Secrets, and a readable swanctl.conf written
// from the same structures for the gateway's ConfigMap. It is pure: no I/O, and no secret value
// ever passes through it (the model holds only Secret references).
package strongswan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/strongswan/govici/vici"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// Config is everything charon needs for one gateway, secrets excepted.
type Config struct {
	// Gateway is "<namespace>/<name>", used in the swanctl.conf header only.
	Gateway string `json:"gateway"`
	// Connections, one per IPsec peer, in the model's peer order (by name).
	Connections []Connection `json:"connections"`
	// SharedKeys, one per connection, in the same order.
	SharedKeys []SharedKey `json:"sharedKeys"`
}

// Connection is one IKE connection (a load-conn) and the peer it belongs to.
type Connection struct {
	// Name is the connection's name in charon and swanctl.conf: the peer's name with every '.'
	// replaced by '_' (the settings syntax reads '.' as a path separator; Kubernetes names never
	// contain '_', so the mapping is one-to-one).
	Name string `json:"name"`
	// Peer is the model peer's name, for mapping SA state back to the VPNPeer.
	Peer string `json:"peer"`
	// IKE is the load-conn body, marshalable with vici.MarshalMessage.
	IKE IKE `json:"ike"`
}

// IKE is the body of a load-conn request (swanctl.conf connections.<conn>). Field order is the
// order of the message and of the swanctl.conf text.
type IKE struct {
	Version     int      `vici:"version" json:"version"`
	LocalAddrs  []string `vici:"local_addrs" json:"local_addrs,omitempty"`
	RemoteAddrs []string `vici:"remote_addrs" json:"remote_addrs,omitempty"`
	Proposals   []string `vici:"proposals" json:"proposals,omitempty"`
	// Encap forces UDP encapsulation of ESP; nil leaves it to NAT detection (the default).
	Encap *bool `vici:"encap" json:"encap,omitempty"`
	// Mobike is always off: the gateway's address never changes under an SA, and MOBIKE
	// address updates only confuse peers behind NAT.
	Mobike      bool   `vici:"mobike" json:"mobike"`
	SendCertReq bool   `vici:"send_certreq" json:"send_certreq"`
	DPDDelay    string `vici:"dpd_delay" json:"dpd_delay,omitempty"`
	// DPDTimeout is IKEv1's dead peer timeout; empty: charon's default.
	DPDTimeout  string `vici:"dpd_timeout" json:"dpd_timeout,omitempty"`
	RekeyTime   string `vici:"rekey_time" json:"rekey_time,omitempty"`
	ReauthTime  string `vici:"reauth_time" json:"reauth_time,omitempty"`
	Unique      string `vici:"unique" json:"unique,omitempty"`
	KeyingTries uint32 `vici:"keyingtries" json:"keyingtries"`
	Local       Auth   `vici:"local" json:"local,omitempty"`
	Remote      Auth   `vici:"remote" json:"remote,omitempty"`
	// Children by name: one named like the connection, except IKEv1 with several remote
	// subnets (IKEv1 negotiates one selector pair per CHILD_SA), which gets "<conn>~<n>" each.
	Children map[string]Child `vici:"children" json:"children,omitempty"`
}

// Auth is one authentication round (local or remote).
type Auth struct {
	Auth string `vici:"auth" json:"auth,omitempty"`
	// ID is the IKE identity; empty leaves charon's default (the IP address).
	ID string `vici:"id" json:"id,omitempty"`
}

// Child is one CHILD_SA configuration (connections.<conn>.children.<child>).
type Child struct {
	Mode         string   `vici:"mode" json:"mode,omitempty"`
	LocalTS      []string `vici:"local_ts" json:"local_ts,omitempty"`
	RemoteTS     []string `vici:"remote_ts" json:"remote_ts,omitempty"`
	ESPProposals []string `vici:"esp_proposals" json:"esp_proposals,omitempty"`
	RekeyTime    string   `vici:"rekey_time" json:"rekey_time,omitempty"`
	StartAction  string   `vici:"start_action" json:"start_action,omitempty"`
	DPDAction    string   `vici:"dpd_action" json:"dpd_action,omitempty"`
	CloseAction  string   `vici:"close_action" json:"close_action,omitempty"`
	// Reqid is the fixed reqid of the CHILD_SA's kernel SAs and policies (decimal; kernel ESP
	// only, Options.Reqids): the ruleset grants by it. Empty lets charon allocate one.
	Reqid string `vici:"reqid" json:"reqid,omitempty"`
}

// ChildNames returns the connection's child names, the narrowest first (fewest remote traffic
// selectors), then by name. Charon gives a proposal the child that matches it best and, of
// equally good ones, the first: a site's CHILD_SA for one subnet matches a child for that subnet
// exactly and the child for all subnets as well, and must get the one for its subnet (its own
// reqid in kernel ESP).
func (c Connection) ChildNames() []string {
	names := make([]string, 0, len(c.IKE.Children))
	for n := range c.IKE.Children {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		if d := len(c.IKE.Children[a].RemoteTS) - len(c.IKE.Children[b].RemoteTS); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return names
}

// LoadConnMessage returns the load-conn request for c, { <Name> = { ... } }, with children in
// name order so the message is the same every time.
func (c Connection) LoadConnMessage() (*vici.Message, error) {
	body, err := vici.MarshalMessage(c.IKE)
	if err != nil {
		return nil, fmt.Errorf("connection %s: %w", c.Name, err)
	}
	if ch, ok := body.Get("children").(*vici.Message); ok {
		sorted := vici.NewMessage()
		for _, n := range c.ChildNames() {
			if err := sorted.Set(n, ch.Get(n)); err != nil {
				return nil, fmt.Errorf("connection %s child %s: %w", c.Name, n, err)
			}
		}
		if err := body.Set("children", sorted); err != nil {
			return nil, fmt.Errorf("connection %s: %w", c.Name, err)
		}
	}
	m := vici.NewMessage()
	if err := m.Set(c.Name, body); err != nil {
		return nil, fmt.Errorf("connection %s: %w", c.Name, err)
	}
	return m, nil
}

// SharedKey describes one IKE pre-shared key without its value: the agent reads Secret, then
// loads it with load-shared under ID (so it can replace or unload exactly this key).
type SharedKey struct {
	// ID is the load-shared/unload-shared identifier: "ike-<connection name>".
	ID string `json:"id"`
	// Owners are the IKE identities the key belongs to: the gateway's local identity (when
	// known) and the peer's remote identity.
	Owners []string `json:"owners"`
	// Secret is where the key is (namespace: the gateway's).
	Secret model.SecretKeyRef `json:"secret"`
	// Connection is the connection name the key is for.
	Connection string `json:"connection"`
}

// LoadShared is the body of a load-shared request. It holds the secret: it prints redacted.
type LoadShared struct {
	ID     string   `vici:"id" json:"id"`
	Type   string   `vici:"type" json:"type"`
	Data   string   `vici:"data" json:"-"`
	Owners []string `vici:"owners" json:"owners"`
}

// String redacts Data so the request can be logged.
func (l LoadShared) String() string {
	return fmt.Sprintf("load-shared{id=%q type=%s data=<redacted> owners=%q}", l.ID, l.Type, l.Owners)
}

// GoString redacts Data for %#v too.
func (l LoadShared) GoString() string { return l.String() }

// LoadShared returns the load-shared body for k carrying data (the Secret's value, read by the
// agent).
func (k SharedKey) LoadShared(data []byte) LoadShared {
	return LoadShared{ID: k.ID, Type: "IKE", Data: string(data), Owners: slices.Clone(k.Owners)}
}

// LoadSharedMessage returns the load-shared request for k carrying data.
func (k SharedKey) LoadSharedMessage(data []byte) (*vici.Message, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("shared key %s: Secret %s key %s is empty", k.ID, k.Secret.Name, k.Secret.Key)
	}
	return vici.MarshalMessage(k.LoadShared(data))
}

// Options tune rendering where the dataplane needs it.
type Options struct {
	// ForceEncap sets encap = yes: UDP-encapsulate ESP even when no NAT is detected, for paths
	// that drop raw ESP. Off by default; NAT detection turns encapsulation on by itself (e.g.
	// behind an OpenStack floating IP), and kernel-libipsec always encapsulates.
	ForceEncap bool
	// Reqids installs each peer's CHILD_SAs with the peer's reqid from the model (kernel ESP:
	// the ruleset's `ipsec in reqid` matches bind grants to it). Off for kernel-libipsec, whose
	// decrypted packets leave a TUN device without an IPsec path the ruleset could match.
	Reqids bool
}
