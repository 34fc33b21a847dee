package nft

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
)

// Counters names the two named nftables counters of one peer in table ip bnerd_vpn.
type Counters struct {
	// In counts packets from the peer's subnets (arriving through the tunnel) that were dropped:
	// everything the peer is not granted.
	In string
	// Out counts packets toward the peer's subnets that were dropped.
	Out string
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

// maxCleanName is the longest peer name used verbatim in counter names (nftables object names
// are at most 255 bytes).
const maxCleanName = 200

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

// PeerCounters returns the names of a peer's counters. It depends on the name alone:
//   - a Kubernetes object name (RFC 1123 subdomain, at most 200 characters) is used verbatim:
//     peer "site-a" has counters "peer_site-a_in" and "peer_site-a_out";
//   - any other name is sanitized to at most 40 characters of [a-z0-9-] and disambiguated by the
//     first 16 hex digits of its SHA-256: "peer_<sanitized>_<hash>_in".
//
// Kubernetes names contain no underscore, so the two forms never collide with each other, and
// distinct Kubernetes names always give distinct counters; Render refuses a gateway whose
// peers' counter names would still collide.
func PeerCounters(peerName string) Counters {
	base := "peer_" + idPart(peerName)
	return Counters{In: base + "_in", Out: base + "_out"}
}

// idPart is the identifier-safe form of a name: the name itself when it is a Kubernetes object
// name, else a sanitized prefix plus a hash of the full name.
func idPart(name string) string {
	if len(name) <= maxCleanName && isDNSSubdomain(name) {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return sanitize(name, 40) + "_" + hex.EncodeToString(sum[:8])
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
