// Package render turns a validated gateway model into everything the gateway runs: the
// strongSwan connections or WireGuard device, and the nftables ruleset. Each dataplane has its
// own pure renderer in a subpackage; Bundle puts their outputs together as the data of the
// gateway's ConfigMap (no secrets: only references) and reads them back in the gateway agent.
package render

import (
	"encoding/json"
	"fmt"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/strongswan"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/wireguard"
)

// ConfigMap data keys.
const (
	KeyModel         = "model.json"
	KeyStrongSwan    = "strongswan.json" // what the agent loads over VICI
	KeySwanctlConf   = "swanctl.conf"    // the same, readable
	KeyWireGuard     = "wireguard.json"  // what the agent configures the device with
	KeyWireGuardConf = "wireguard.conf"  // the same, readable
	KeyRuleset       = "ruleset.nft"     // loaded with nft -f, atomically
)

// Options are the operator's dataplane settings.
type Options struct {
	// UserspaceDataplane: kernel-libipsec (TUN ipsec0) instead of kernel ESP.
	UserspaceDataplane bool
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
	b := &Bundle{Model: gw}
	var err error
	switch gw.Protocol {
	case model.ProtocolIPsec:
		if b.StrongSwan, err = strongswan.Render(gw, strongswan.Options{}); err != nil {
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

// ConfigMapData is the bundle as ConfigMap data.
func (b *Bundle) ConfigMapData() (map[string]string, error) {
	data := map[string]string{KeyRuleset: b.Ruleset}
	put := func(key string, v any) error {
		raw, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding %s: %w", key, err)
		}
		data[key] = string(raw) + "\n"
		return nil
	}
	if err := put(KeyModel, b.Model); err != nil {
		return nil, err
	}
	if b.StrongSwan != nil {
		if err := put(KeyStrongSwan, b.StrongSwan); err != nil {
			return nil, err
		}
		conf, err := b.StrongSwan.SwanctlConf()
		if err != nil {
			return nil, fmt.Errorf("swanctl.conf: %w", err)
		}
		data[KeySwanctlConf] = conf
	}
	if b.WireGuard != nil {
		if err := put(KeyWireGuard, b.WireGuard); err != nil {
			return nil, err
		}
		text, err := b.WireGuard.Text()
		if err != nil {
			return nil, fmt.Errorf("wireguard.conf: %w", err)
		}
		data[KeyWireGuardConf] = text
	}
	return data, nil
}

// FromConfigMapData reads a bundle back (the gateway agent's side).
func FromConfigMapData(data map[string]string) (*Bundle, error) {
	b := &Bundle{Model: &model.Gateway{}, Ruleset: data[KeyRuleset]}
	get := func(key string, v any) error {
		raw, ok := data[key]
		if !ok {
			return fmt.Errorf("configuration has no %s", key)
		}
		if err := json.Unmarshal([]byte(raw), v); err != nil {
			return fmt.Errorf("decoding %s: %w", key, err)
		}
		return nil
	}
	if err := get(KeyModel, b.Model); err != nil {
		return nil, err
	}
	if b.Ruleset == "" {
		return nil, fmt.Errorf("configuration has no %s", KeyRuleset)
	}
	switch b.Model.Protocol {
	case model.ProtocolIPsec:
		b.StrongSwan = &strongswan.Config{}
		if err := get(KeyStrongSwan, b.StrongSwan); err != nil {
			return nil, err
		}
	case model.ProtocolWireGuard:
		b.WireGuard = &wireguard.Config{}
		if err := get(KeyWireGuard, b.WireGuard); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("configuration has unknown protocol %q", b.Model.Protocol)
	}
	return b, nil
}
