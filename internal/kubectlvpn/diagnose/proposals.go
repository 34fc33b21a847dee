package diagnose

import (
	"slices"
	"strings"

	"github.com/bnerd/bnerd-vpn-operator/internal/deviceconfig"
)

// Proposals are read and named by internal/deviceconfig: what charon's log says the client
// proposed (deviceconfig.ParseCharonProposals), what the gateway is configured with
// (deviceconfig.ReadProposal), which algorithms are weak (deviceconfig.Weakness). Here is
// only how diagnose compares and names them.

// proposalList is the proposals in strongSwan notation, comma separated.
func proposalList(ps []deviceconfig.Transforms) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// weakIn lists the weak algorithms of the proposals, in the order they come.
func weakIn(ps []deviceconfig.Transforms) []string {
	var out []string
	for _, p := range ps {
		for _, k := range []deviceconfig.Kind{deviceconfig.Encryption, deviceconfig.Integrity, deviceconfig.PRF, deviceconfig.DH} {
			for _, a := range p.Of(k) {
				if _, weak := deviceconfig.Weakness(a); weak && !slices.Contains(out, a) {
					out = append(out, a)
				}
			}
		}
	}
	return out
}

// mismatch names what the client's proposals have in common with the gateway's by transform,
// i.e. why none of them matched: e.g. "no DH group in common (the client offers modp1024)".
func mismatch(client, gateway []deviceconfig.Transforms) string {
	kinds := []struct {
		name string
		kind deviceconfig.Kind
	}{
		{"encryption algorithm", deviceconfig.Encryption},
		{"integrity algorithm", deviceconfig.Integrity},
		{"PRF", deviceconfig.PRF},
		{"DH group", deviceconfig.DH},
	}
	var missing []string
	for _, k := range kinds {
		var c, g []string
		for _, p := range client {
			for _, a := range p.Of(k.kind) {
				if !slices.Contains(c, a) {
					c = append(c, a)
				}
			}
		}
		for _, p := range gateway {
			for _, a := range p.Of(k.kind) {
				if !slices.Contains(g, a) {
					g = append(g, a)
				}
			}
		}
		if len(c) == 0 || len(g) == 0 {
			// AEAD has no integrity; a CHILD_SA in IKE_AUTH is proposed without DH groups
			continue
		}
		common := false
		for _, a := range c {
			if slices.Contains(g, a) {
				common = true
			}
		}
		if !common {
			missing = append(missing, "no "+k.name+" in common (the client offers "+strings.Join(c, ", ")+")")
		}
	}
	if len(missing) == 0 {
		return "each algorithm is offered by both, but in no proposal combined as the gateway combines them"
	}
	return strings.Join(missing, "; ")
}
