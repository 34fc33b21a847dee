package nft

import (
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen/modelgen"
)

func TestGrantedFlows(t *testing.T) {
	g := labGateway() // web tcp/80, dns udp/53 on vipWeb: peer-a; admin tcp/80 on vipAdmin: peer-b; plc: peer-a
	keep := GrantedFlows(g)
	fwd := func(src, dst string, proto string, port uint16) Flow {
		return Flow{Mark: MarkForward, Protocol: proto, Src: addr(src), Dst: addr(dst), DstPort: port}
	}
	rev := func(src string, proto string, gwPort uint16) Flow {
		return Flow{Mark: MarkReverse, Protocol: proto, Src: addr(src), Dst: addr(gwCluster), DstPort: gwPort}
	}
	for _, c := range []struct {
		name string
		f    Flow
		want bool
	}{
		{"granted web", fwd(peerAIP, vipWeb, "tcp", 80), true},
		{"granted dns", fwd(peerAIP, vipWeb, "udp", 53), true},
		{"other peer on web", fwd(peerBIP, vipWeb, "tcp", 80), false},
		{"port not exposed", fwd(peerAIP, vipWeb, "tcp", 81), false},
		{"protocol not exposed", fwd(peerAIP, vipWeb, "udp", 80), false},
		{"dark peer", fwd(peerCIP, vipAdmin, "tcp", 80), false},
		{"granted admin", fwd(peerBIP, vipAdmin, "tcp", 80), true},
		{"reverse from an internal source", rev(internalIP, "tcp", 20000), true},
		{"reverse udp", rev(internalIP, "udp", 20001), true},
		{"reverse from elsewhere", rev(backendIP, "tcp", 20000), false},
		{"reverse port gone", rev(internalIP, "tcp", 20002), false},
		{"not ours", Flow{Mark: 0, Protocol: "tcp", Src: addr(peerBIP), Dst: addr(vipWeb), DstPort: 80}, true},
	} {
		if got := keep(c.f); got != c.want {
			t.Errorf("%s: %+v kept=%v, want %v", c.name, c.f, got, c.want)
		}
	}

	// Revoked: peer-a goes dark; its grants and the reverse exposure it held are gone.
	g.Peers[0].Authorization = modelgen.Dark(model.ReasonNoGrants, "")
	g.Peers[0].Exposures, g.Peers[0].ReverseExposures = nil, nil
	g.Exposures[0].GrantedTo, g.Exposures[1].GrantedTo = nil, nil
	g.ReverseExposures[0].Grantee = ""
	keep = GrantedFlows(g)
	for _, f := range []Flow{fwd(peerAIP, vipWeb, "tcp", 80), fwd(peerAIP, vipWeb, "udp", 53), rev(internalIP, "tcp", 20000)} {
		if keep(f) {
			t.Errorf("after the revocation %+v is still kept", f)
		}
	}
	if !keep(fwd(peerBIP, vipAdmin, "tcp", 80)) {
		t.Error("another peer's granted flow was cut")
	}
}
