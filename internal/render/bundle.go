// Package render turns a validated gateway model into everything the gateway runs: the
// strongSwan connections or WireGuard device, and the nftables ruleset. Each dataplane has its
// own pure renderer in a subpackage. The gateway's ConfigMap carries the model alone (no
// secrets: only references); the gateway agent verifies it and renders the Bundle itself.
package render

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/strongswan"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/wireguard"
)

// KeyModel is the ConfigMap's one data key: the validated model.
const KeyModel = "model.json"

// Names of the rendered texts (Bundle.Text).
const (
	KeySwanctlConf   = "swanctl.conf"
	KeyWireGuardConf = "wireguard.conf"
	KeyRuleset       = "ruleset.nft"
)

// Options are the operator's dataplane settings.
type Options struct {
	// UserspaceDataplane: kernel-libipsec (TUN ipsec0) instead of kernel ESP. Kernel ESP binds
	// each peer's grants to its CHILD_SAs' reqid (model.FirstReqid).
	UserspaceDataplane bool
	// Placement is what the agent knows of where it runs (its pod's spec); a model that
	// disagrees with it is refused. Nil: not checked (the operator, which built the model,
	// and tools that render a model for an engineer to read).
	Placement *model.Placement
}

// Bundle is one gateway's rendered dataplane.
type Bundle struct {
	Model      *model.Gateway
	StrongSwan *strongswan.Config // IPsec gateways
	WireGuard  *wireguard.Config  // WireGuard gateways
	Ruleset    string
}

// Render renders every dataplane of the gateway, or says which one cannot be rendered.
func Render(gw *model.Gateway, opts Options) (*Bundle, error) {
	if opts.Placement != nil {
		if err := opts.Placement.Check(gw); err != nil {
			return nil, err
		}
	}
	b := &Bundle{Model: gw}
	var err error
	switch gw.Protocol {
	case model.ProtocolIPsec:
		ss := strongswan.Options{Reqids: !opts.UserspaceDataplane, ForceEncap: gw.IPsec != nil && gw.IPsec.ForceEncap}
		if b.StrongSwan, err = strongswan.Render(gw, ss); err != nil {
			return nil, fmt.Errorf("strongSwan configuration: %w", err)
		}
	case model.ProtocolWireGuard:
		if b.WireGuard, err = wireguard.Render(gw); err != nil {
			return nil, fmt.Errorf("WireGuard configuration: %w", err)
		}
	default:
		return nil, fmt.Errorf("protocol %q has no renderer", gw.Protocol)
	}
	if b.Ruleset, err = nft.Render(gw, nft.DefaultOptions(gw, opts.UserspaceDataplane)); err != nil {
		return nil, fmt.Errorf("nftables ruleset: %w", err)
	}
	return b, nil
}

// ConfigMapData is the bundle as ConfigMap data: the validated model alone. The gateway agent
// renders the dataplane from it itself (FromConfigMapData), so nothing in the ConfigMap is
// ever loaded as it stands — no ruleset text, no daemon configuration.
func (b *Bundle) ConfigMapData() (map[string]string, error) {
	raw, err := json.MarshalIndent(b.Model, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", KeyModel, err)
	}
	return map[string]string{KeyModel: string(raw) + "\n"}, nil
}

// FromConfigMapData is the gateway agent's side: it accepts a ConfigMap that holds the model
// and nothing else, decodes it strictly, checks the model's invariants (model.Verify, the
// same code the operator's model is built to) and renders the dataplane from it with the
// agent's own options. Anything else is refused, and the caller keeps its last good bundle.
func FromConfigMapData(data map[string]string, opts Options) (*Bundle, error) {
	var extra []string
	for k := range data {
		if k != KeyModel {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		return nil, fmt.Errorf("configuration holds %s besides %s: only the model is accepted, the agent renders everything else itself", strings.Join(extra, ", "), KeyModel)
	}
	raw, ok := data[KeyModel]
	if !ok {
		return nil, fmt.Errorf("configuration has no %s", KeyModel)
	}
	m, err := DecodeModel([]byte(raw))
	if err != nil {
		return nil, err
	}
	return Render(m, opts)
}

// DecodeModel decodes and verifies a model: unknown fields and trailing data are refused.
func DecodeModel(raw []byte) (*model.Gateway, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	m := &model.Gateway{}
	if err := dec.Decode(m); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", KeyModel, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("decoding %s: data after the model", KeyModel)
	}
	if err := model.Verify(m); err != nil {
		return nil, fmt.Errorf("%s does not verify: %w", KeyModel, err)
	}
	return m, nil
}

// Text is the rendered dataplane as an engineer reads it: the strongSwan configuration or the
// WireGuard device, and the ruleset (what `gateway-agent render` prints).
func (b *Bundle) Text() (map[string]string, error) {
	out := map[string]string{KeyRuleset: b.Ruleset}
	if b.StrongSwan != nil {
		conf, err := b.StrongSwan.SwanctlConf()
		if err != nil {
			return nil, fmt.Errorf("swanctl.conf: %w", err)
		}
		out[KeySwanctlConf] = conf
	}
	if b.WireGuard != nil {
		text, err := b.WireGuard.Text()
		if err != nil {
			return nil, fmt.Errorf("wireguard.conf: %w", err)
		}
		out[KeyWireGuardConf] = text
	}
	return out, nil
}
