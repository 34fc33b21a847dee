package nft

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// PeerDrops names the set elements that count one peer's dropped packets, one for each of its
// subnets (as the ruleset resolves overlaps): In from the subnet through the tunnel, Out toward
// it; everything the peer is not granted. An element's counter exists from its subnet's first
// drop on (DropName).
type PeerDrops struct {
	In, Out []string
}

// DropName names the element of a drops set (drops_in_28, drops_out_28, ...) for one /N
// network: "drops_in_28 203.0.113.0".
func DropName(set string, network netip.Addr) string { return set + " " + network.String() }

// DropCounters returns, by peer name, the elements counting each peer's drops in the ruleset
// rendered from g.
func DropCounters(g *model.Gateway) (map[string]PeerDrops, error) {
	peers, pieces, err := peerSubnets(g)
	if err != nil {
		return nil, err
	}
	out := make(map[string]PeerDrops, len(peers))
	for _, e := range pieces {
		bits := e.prefix.Bits()
		d := out[peers[e.owner].Name]
		d.In = append(d.In, DropName(lengthName(SetDropsIn, bits), e.prefix.Addr()))
		d.Out = append(d.Out, DropName(lengthName(SetDropsOut, bits), e.prefix.Addr()))
		out[peers[e.owner].Name] = d
	}
	return out, nil
}

// Counters that are not per peer.
const (
	// CounterUnknownIn counts packets from the tunnel whose source lies in no peer's subnets.
	CounterUnknownIn = "drop_unknown_in"
	// CounterOther counts any other forwarded packet that was dropped (neither from the tunnel nor
	// toward a peer's subnets).
	CounterOther = "drop_other"
	// CounterSpoofed (kernel ESP) counts packets from the tunnel whose source is not one of the
	// subnets the SA they came through carries: another peer's address, or no peer's.
	CounterSpoofed = "drop_spoofed"
)

// isDNSSubdomain reports whether s is a Kubernetes object name (RFC 1123 subdomain, any
// length): dot-separated labels of [a-z0-9-] that start and end with a letter or digit.
func isDNSSubdomain(s string) bool {
	if s == "" {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// sanitize keeps lowercase letters and digits, turns runs of anything else into one '-', trims
// '-' at both ends and truncates to max bytes.
func sanitize(s string, max int) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
			if b.Len() >= max {
				break
			}
			continue
		}
		dash = true
	}
	return strings.TrimRight(b.String(), "-")
}

// commentName is a name as it may appear in a ruleset comment: the name itself when it is a
// Kubernetes object name of at most 63 characters, else its identifier-safe form. The result
// only ever holds [a-z0-9._-].
func commentName(name string) string {
	if len(name) <= 63 && isDNSSubdomain(name) {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return sanitize(name, 24) + "_" + hex.EncodeToString(sum[:4])
}

// CounterValue is what one named counter has counted since the ruleset was last applied.
type CounterValue struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// ParseCounters reads the output of `nft -j list counters table ip bnerd_vpn` into counter
// values by name (counters of other tables are ignored). Applying the ruleset re-creates the
// table, so every counter restarts from zero then.
func ParseCounters(listJSON []byte) (map[string]CounterValue, error) {
	var doc struct {
		Nftables []struct {
			Counter *struct {
				Family  string `json:"family"`
				Table   string `json:"table"`
				Name    string `json:"name"`
				Packets uint64 `json:"packets"`
				Bytes   uint64 `json:"bytes"`
			} `json:"counter"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(listJSON, &doc); err != nil {
		return nil, fmt.Errorf("parse nft counters: %w", err)
	}
	out := make(map[string]CounterValue)
	for _, o := range doc.Nftables {
		c := o.Counter
		if c == nil || c.Family != Family || c.Table != Table {
			continue
		}
		out[c.Name] = CounterValue{Packets: c.Packets, Bytes: c.Bytes}
	}
	return out, nil
}

// ParseDrops reads the output of `nft -j list set ip bnerd_vpn drops_in_28` (or of a listing
// of several sets) into the counters of the drops sets' elements, by DropName; other sets are
// ignored.
func ParseDrops(listJSON []byte) (map[string]CounterValue, error) {
	var doc struct {
		Nftables []struct {
			Set *struct {
				Family string            `json:"family"`
				Table  string            `json:"table"`
				Name   string            `json:"name"`
				Elem   []json.RawMessage `json:"elem"`
			} `json:"set"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(listJSON, &doc); err != nil {
		return nil, fmt.Errorf("parse nft drops sets: %w", err)
	}
	out := make(map[string]CounterValue)
	for _, o := range doc.Nftables {
		s := o.Set
		if s == nil || s.Family != Family || s.Table != Table || !IsDropsSet(s.Name) {
			continue
		}
		for _, raw := range s.Elem {
			var e struct {
				Elem *struct {
					Val     string        `json:"val"`
					Counter *CounterValue `json:"counter"`
				} `json:"elem"`
			}
			if err := json.Unmarshal(raw, &e); err != nil {
				return nil, fmt.Errorf("parse nft drops set %s: %w", s.Name, err)
			}
			if e.Elem == nil || e.Elem.Counter == nil {
				continue
			}
			a, err := netip.ParseAddr(e.Elem.Val)
			if err != nil {
				return nil, fmt.Errorf("parse nft drops set %s: element %q: %w", s.Name, e.Elem.Val, err)
			}
			out[DropName(s.Name, a)] = *e.Elem.Counter
		}
	}
	return out, nil
}

// IsDropsSet reports whether a set of the ruleset is one counting a peer subnet's drops
// (drops_in_28, drops_out_24, ...).
func IsDropsSet(name string) bool {
	return strings.HasPrefix(name, SetDropsIn+"_") || strings.HasPrefix(name, SetDropsOut+"_")
}
