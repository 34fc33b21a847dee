package model

import (
	"math/rand/v2"
	"reflect"
	"testing"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

type wantDecision struct {
	authorized bool
	reason     string
	message    string // exact when set
}

// conflictHint ends every SubnetConflict message.
const conflictHint = "; the overlapping subnets get no tunnel (one source, one tunnel)"

func TestAuthorize(t *testing.T) {
	ipsecGW := testGateway(vpnv1.ProtocolIPsec)
	wgGW := testGateway(vpnv1.ProtocolWireGuard)
	noRevGW := testGateway(vpnv1.ProtocolIPsec)
	noRevGW.Spec.ReverseExposures = nil

	const reverseHint = "; a reverse exposure may only be granted to the peer whose subnets contain its target"

	tests := []struct {
		name     string
		gw       *vpnv1.VPNGateway
		peers    []vpnv1.VPNPeer
		want     map[string]wantDecision
		problems []Problem // exact; nil means none
	}{
		{
			name:  "single peer without block: default allow",
			gw:    ipsecGW,
			peers: []vpnv1.VPNPeer{ipsecPeer("a", []string{"10.20.0.0/16"})},
			want: map[string]wantDecision{"a": {true, ReasonDefaultAllow,
				"single-peer gateway: reaches every exposure and reverse exposure"}},
		},
		{
			name:  "single wireguard peer without block: default allow",
			gw:    wgGW,
			peers: []vpnv1.VPNPeer{wgPeer("a", []string{"10.20.0.0/16"})},
			want:  map[string]wantDecision{"a": {true, ReasonDefaultAllow, ""}},
		},
		{
			name:  "single peer with empty block: no grants",
			gw:    ipsecGW,
			peers: []vpnv1.VPNPeer{ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants())},
			want:  map[string]wantDecision{"a": {false, ReasonNoGrants, MessageEmptyBlock}},
		},
		{
			name:  "single peer with empty lists (not nil): no grants",
			gw:    ipsecGW,
			peers: []vpnv1.VPNPeer{ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Authorization(&vpnv1.Authorization{Exposures: []string{}, ReverseExposures: []string{}}))},
			want:  map[string]wantDecision{"a": {false, ReasonNoGrants, MessageEmptyBlock}},
		},
		{
			name:  "single peer with explicit block: authorized as written",
			gw:    ipsecGW,
			peers: []vpnv1.VPNPeer{ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants("metrics"))},
			want: map[string]wantDecision{"a": {true, ReasonAuthorized,
				`granted exposures: "metrics"; reverse exposures: none`}},
		},
		{
			name: "two peers without blocks: both dark",
			gw:   ipsecGW,
			peers: []vpnv1.VPNPeer{
				ipsecPeer("a", []string{"10.20.0.0/16"}),
				ipsecPeer("b", []string{"10.30.0.0/16"}),
			},
			want: map[string]wantDecision{
				"a": {false, ReasonNoGrants, MessageNoBlockMultiPeer},
				"b": {false, ReasonNoGrants, MessageNoBlockMultiPeer},
			},
		},
		{
			name: "multi-peer: block grants, missing block and empty block",
			gw:   ipsecGW,
			peers: []vpnv1.VPNPeer{
				ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants("metrics", "internal-api", "metrics"), gen.ReverseGrants("acme-erp")),
				ipsecPeer("b", []string{"10.30.0.0/16"}),
				ipsecPeer("c", []string{"10.40.0.0/16"}, gen.Grants()),
			},
			want: map[string]wantDecision{
				"a": {true, ReasonAuthorized, `granted exposures: "internal-api", "metrics"; reverse exposures: "acme-erp"`},
				"b": {false, ReasonNoGrants, MessageNoBlockMultiPeer},
				"c": {false, ReasonNoGrants, MessageEmptyBlock},
			},
		},
		{
			name: "unknown grants are listed sorted with their kind",
			gw:   ipsecGW,
			peers: []vpnv1.VPNPeer{ipsecPeer("a", []string{"10.20.0.0/16"},
				gen.Grants("zeta", "metrics", "acme-erp"), gen.ReverseGrants("ghost", "acme-erp", "internal-api"))},
			want: map[string]wantDecision{"a": {false, ReasonUnknownGrant,
				`authorization names what gateway "gw" does not have: exposure "acme-erp", exposure "zeta", reverse exposure "ghost", reverse exposure "internal-api"`}},
		},
		{
			name: "unknown grant on a multi-peer gateway",
			gw:   ipsecGW,
			peers: []vpnv1.VPNPeer{
				ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants("internal-api")),
				ipsecPeer("b", []string{"10.30.0.0/16"}, gen.Grants("internal-apl")),
			},
			want: map[string]wantDecision{
				"a": {true, ReasonAuthorized, ""},
				"b": {false, ReasonUnknownGrant, `authorization names what gateway "gw" does not have: exposure "internal-apl"`},
			},
		},
		{
			name:  "protocol mismatch: wireguard peer on ipsec gateway",
			gw:    ipsecGW,
			peers: []vpnv1.VPNPeer{wgPeer("a", []string{"10.20.0.0/16"})},
			want: map[string]wantDecision{"a": {false, ReasonProtocolMismatch,
				`peer has protocol wireguard but gateway "gw" uses protocol ipsec`}},
		},
		{
			name:  "protocol mismatch: ipsec peer on wireguard gateway, checked before grants",
			gw:    wgGW,
			peers: []vpnv1.VPNPeer{ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants("nope"))},
			want: map[string]wantDecision{"a": {false, ReasonProtocolMismatch,
				`peer has protocol ipsec but gateway "gw" uses protocol wireguard`}},
		},
		{
			name: "protocol mismatch: both and neither section",
			gw:   ipsecGW,
			peers: []vpnv1.VPNPeer{
				func() vpnv1.VPNPeer {
					p := ipsecPeer("both", []string{"10.20.0.0/16"}, gen.Grants("metrics"))
					p.Spec.WireGuard = &vpnv1.WireGuardPeer{PublicKey: testWGKey, Subnets: []string{"10.21.0.0/16"}}
					return p
				}(),
				func() vpnv1.VPNPeer {
					p := ipsecPeer("neither", []string{"10.30.0.0/16"}, gen.Grants("metrics"))
					p.Spec.IPsec = nil
					return p
				}(),
			},
			want: map[string]wantDecision{
				"both":    {false, ReasonProtocolMismatch, `peer has both ipsec and wireguard settings but gateway "gw" uses protocol ipsec`},
				"neither": {false, ReasonProtocolMismatch, `peer has neither ipsec nor wireguard settings but gateway "gw" uses protocol ipsec`},
			},
		},
		{
			name: "a mismatched peer still counts: the other peer is default-deny",
			gw:   ipsecGW,
			peers: []vpnv1.VPNPeer{
				ipsecPeer("a", []string{"10.20.0.0/16"}),
				wgPeer("b", []string{"10.30.0.0/16"}),
			},
			want: map[string]wantDecision{
				"a": {false, ReasonNoGrants, MessageNoBlockMultiPeer},
				"b": {false, ReasonProtocolMismatch, ""},
			},
		},
		{
			name: "subnet conflict: the younger peer is dark",
			gw:   noRevGW,
			peers: []vpnv1.VPNPeer{
				ipsecPeer("b", []string{"10.20.1.0/24", "172.16.0.0/24"}, gen.Grants("metrics"), age(5)),
				ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants("metrics"), age(1)),
			},
			want: map[string]wantDecision{
				"a": {true, ReasonAuthorized, ""},
				"b": {false, ReasonSubnetConflict, `subnets overlap those of older peer "a": 10.20.1.0/24 overlaps 10.20.0.0/16` + conflictHint},
			},
			problems: []Problem{{ReasonSubnetOverlap,
				`subnets of peer "b" overlap those of older peer "a": 10.20.1.0/24 overlaps 10.20.0.0/16; the younger gets no tunnel for them and cannot be authorized`}},
		},
		{
			name: "subnet conflict: same creation time, the later name is younger",
			gw:   noRevGW,
			peers: []vpnv1.VPNPeer{
				ipsecPeer("y", []string{"10.20.0.0/16"}, gen.Grants("metrics"), age(0)),
				ipsecPeer("x", []string{"10.20.0.0/16"}, gen.Grants("metrics"), age(0)),
			},
			want: map[string]wantDecision{
				"x": {true, ReasonAuthorized, ""},
				"y": {false, ReasonSubnetConflict, `subnets overlap those of older peer "x": 10.20.0.0/16 overlaps 10.20.0.0/16` + conflictHint},
			},
			problems: []Problem{{ReasonSubnetOverlap,
				`subnets of peer "y" overlap those of older peer "x": 10.20.0.0/16 overlaps 10.20.0.0/16; the younger gets no tunnel for them and cannot be authorized`}},
		},
		{
			name: "subnet conflict with a dark older peer still darkens the younger",
			gw:   noRevGW,
			peers: []vpnv1.VPNPeer{
				ipsecPeer("a", []string{"10.0.0.0/8"}, age(1)),
				ipsecPeer("b", []string{"10.20.0.0/16"}, gen.Grants("metrics"), age(2)),
			},
			want: map[string]wantDecision{
				"a": {false, ReasonNoGrants, MessageNoBlockMultiPeer},
				"b": {false, ReasonSubnetConflict, `subnets overlap those of older peer "a": 10.20.0.0/16 overlaps 10.0.0.0/8` + conflictHint},
			},
			problems: []Problem{{ReasonSubnetOverlap,
				`subnets of peer "b" overlap those of older peer "a": 10.20.0.0/16 overlaps 10.0.0.0/8; the younger gets no tunnel for them and cannot be authorized`}},
		},
		{
			name: "subnet conflict: a dark younger peer is SubnetConflict too (it gets no tunnel for the overlap)",
			gw:   noRevGW,
			peers: []vpnv1.VPNPeer{
				ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants("metrics"), age(1)),
				ipsecPeer("b", []string{"10.20.0.0/24"}, gen.Grants("nope"), age(2)),
			},
			want: map[string]wantDecision{
				"a": {true, ReasonAuthorized, ""},
				"b": {false, ReasonSubnetConflict, ""},
			},
			problems: []Problem{{ReasonSubnetOverlap,
				`subnets of peer "b" overlap those of older peer "a": 10.20.0.0/24 overlaps 10.20.0.0/16; the younger gets no tunnel for them and cannot be authorized`}},
		},
		{
			name: "subnet conflict with two older peers names both",
			gw:   noRevGW,
			peers: []vpnv1.VPNPeer{
				ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants("metrics"), age(1)),
				ipsecPeer("b", []string{"10.30.0.0/16"}, gen.Grants("metrics"), age(2)),
				ipsecPeer("c", []string{"10.0.0.0/8"}, gen.Grants("metrics"), age(3)),
			},
			want: map[string]wantDecision{
				"a": {true, ReasonAuthorized, ""},
				"b": {true, ReasonAuthorized, ""},
				"c": {false, ReasonSubnetConflict,
					`subnets overlap those of older peer "a": 10.0.0.0/8 overlaps 10.20.0.0/16; "b": 10.0.0.0/8 overlaps 10.30.0.0/16` + conflictHint},
			},
			problems: []Problem{
				{ReasonSubnetOverlap, `subnets of peer "c" overlap those of older peer "a": 10.0.0.0/8 overlaps 10.20.0.0/16; the younger gets no tunnel for them and cannot be authorized`},
				{ReasonSubnetOverlap, `subnets of peer "c" overlap those of older peer "b": 10.0.0.0/8 overlaps 10.30.0.0/16; the younger gets no tunnel for them and cannot be authorized`},
			},
		},
		{
			name: "reverse exposure granted to a second, disjoint peer",
			gw:   ipsecGW,
			peers: []vpnv1.VPNPeer{
				ipsecPeer("a", []string{"10.20.0.0/16"}, gen.ReverseGrants("acme-erp"), age(1)),
				ipsecPeer("b", []string{"10.30.0.0/16"}, gen.Grants("metrics"), gen.ReverseGrants("acme-erp"), age(2)),
			},
			want: map[string]wantDecision{
				"a": {true, ReasonAuthorized, `granted exposures: none; reverse exposures: "acme-erp"`},
				"b": {false, ReasonReverseExposureOutsideSubnets,
					`reverse exposure "acme-erp" targets 10.20.0.5, which is not inside this peer's subnets (10.30.0.0/16)` + reverseHint},
			},
			problems: []Problem{{ReasonReverseExposureConflict,
				`reverse exposure "acme-erp" (10.20.0.5) is granted to peer "b", whose subnets do not contain it; its valid grantee is "a"`}},
		},
		{
			name: "reverse exposure granted only to a peer that does not contain it",
			gw:   ipsecGW,
			peers: []vpnv1.VPNPeer{
				ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants("metrics")),
				ipsecPeer("b", []string{"10.30.0.0/16", "10.40.0.0/16"}, gen.ReverseGrants("acme-erp")),
			},
			want: map[string]wantDecision{
				"a": {true, ReasonAuthorized, ""},
				"b": {false, ReasonReverseExposureOutsideSubnets,
					`reverse exposure "acme-erp" targets 10.20.0.5, which is not inside this peer's subnets (10.30.0.0/16, 10.40.0.0/16)` + reverseHint},
			},
			problems: []Problem{{ReasonReverseExposureConflict,
				`reverse exposure "acme-erp" (10.20.0.5) is granted to peer "b", whose subnets do not contain it; no authorized peer holding the grant contains it`}},
		},
		{
			name:  "default allow includes reverse exposures: a target outside the single peer darkens it",
			gw:    ipsecGW,
			peers: []vpnv1.VPNPeer{ipsecPeer("a", []string{"10.30.0.0/16"})},
			want: map[string]wantDecision{"a": {false, ReasonReverseExposureOutsideSubnets,
				`reverse exposure "acme-erp" targets 10.20.0.5, which is not inside this peer's subnets (10.30.0.0/16)` + reverseHint}},
			problems: []Problem{{ReasonReverseExposureConflict,
				`reverse exposure "acme-erp" (10.20.0.5) is granted to peer "a", whose subnets do not contain it; no authorized peer holding the grant contains it`}},
		},
		{
			name: "subnet conflict is decided before the reverse-exposure check",
			gw:   ipsecGW,
			peers: []vpnv1.VPNPeer{
				ipsecPeer("a", []string{"10.20.0.0/16"}, gen.ReverseGrants("acme-erp"), age(1)),
				ipsecPeer("b", []string{"10.20.0.0/24"}, gen.ReverseGrants("acme-erp"), age(2)),
			},
			want: map[string]wantDecision{
				"a": {true, ReasonAuthorized, ""},
				"b": {false, ReasonSubnetConflict, `subnets overlap those of older peer "a": 10.20.0.0/24 overlaps 10.20.0.0/16` + conflictHint},
			},
			problems: []Problem{{ReasonSubnetOverlap,
				`subnets of peer "b" overlap those of older peer "a": 10.20.0.0/24 overlaps 10.20.0.0/16; the younger gets no tunnel for them and cannot be authorized`}},
		},
		{
			name:  "no gateway: every peer GatewayNotFound",
			gw:    nil,
			peers: []vpnv1.VPNPeer{ipsecPeer("a", []string{"10.20.0.0/16"})},
			want:  map[string]wantDecision{"a": {false, ReasonGatewayNotFound, `gateway "gw" not found`}},
		},
		{
			name: "no peers",
			gw:   ipsecGW,
			want: map[string]wantDecision{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, problems := Authorize(tt.gw, tt.peers, Scope{})
			if len(got) != len(tt.want) {
				t.Errorf("got %d decisions, want %d: %+v", len(got), len(tt.want), got)
			}
			for name, w := range tt.want {
				d, ok := got[name]
				if !ok {
					t.Errorf("no decision for %s", name)
					continue
				}
				if d.Authorized != w.authorized || d.Reason != w.reason {
					t.Errorf("%s: got %v/%s (%q), want %v/%s", name, d.Authorized, d.Reason, d.Message, w.authorized, w.reason)
				}
				if w.message != "" && d.Message != w.message {
					t.Errorf("%s: message\n got  %q\n want %q", name, d.Message, w.message)
				}
				if d.Message == "" {
					t.Errorf("%s: empty message", name)
				}
			}
			if !reflect.DeepEqual(problems, tt.problems) {
				t.Errorf("problems\n got  %q\n want %q", problems, tt.problems)
			}
			// Same decisions whatever the order of the peers.
			r := rand.New(rand.NewPCG(1, 2))
			for range 5 {
				shuffled := append([]vpnv1.VPNPeer(nil), tt.peers...)
				r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
				got2, problems2 := Authorize(tt.gw, shuffled, Scope{})
				if !reflect.DeepEqual(got, got2) || !reflect.DeepEqual(problems, problems2) {
					t.Fatalf("shuffled peers changed the outcome:\n%+v %+v\n%+v %+v", got, problems, got2, problems2)
				}
			}
		})
	}
}

// A second peer flips the first from DefaultAllow to NoGrants; removing it flips it back.
func TestAuthorizeFlipsWithPeerCount(t *testing.T) {
	gw := testGateway(vpnv1.ProtocolIPsec)
	a := ipsecPeer("a", []string{"10.20.0.0/16"}, age(1))
	b := ipsecPeer("b", []string{"10.30.0.0/16"}, gen.Grants("metrics"), age(2))

	steps := []struct {
		peers []vpnv1.VPNPeer
		want  Decision
	}{
		{[]vpnv1.VPNPeer{a}, Decision{true, ReasonDefaultAllow, "single-peer gateway: reaches every exposure and reverse exposure"}},
		{[]vpnv1.VPNPeer{a, b}, Decision{false, ReasonNoGrants, MessageNoBlockMultiPeer}},
		{[]vpnv1.VPNPeer{a}, Decision{true, ReasonDefaultAllow, "single-peer gateway: reaches every exposure and reverse exposure"}},
	}
	for i, s := range steps {
		got, _ := Authorize(gw, s.peers, Scope{})
		if got["a"] != s.want {
			t.Errorf("step %d (%d peers): a = %+v, want %+v", i, len(s.peers), got["a"], s.want)
		}
	}
	// The same flip through Build: the grant lists follow the decision.
	for i, s := range steps {
		m, errs := Build(testInput(s.peers...))
		if errs != nil {
			t.Fatalf("step %d: %v", i, errs)
		}
		pa := m.Peers[0]
		if pa.Authorization != s.want {
			t.Errorf("step %d: Build a = %+v, want %+v", i, pa.Authorization, s.want)
		}
		if s.want.Authorized {
			if len(pa.Exposures) != 2 || len(pa.ReverseExposures) != 1 {
				t.Errorf("step %d: DefaultAllow grants %v %v", i, pa.Exposures, pa.ReverseExposures)
			}
		} else if pa.Exposures != nil || pa.ReverseExposures != nil {
			t.Errorf("step %d: dark peer holds %v %v", i, pa.Exposures, pa.ReverseExposures)
		}
	}
}
