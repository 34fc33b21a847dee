package model

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// BenchmarkBuild10kPeers: the whole model build with authorization for one gateway with
// 10,000 IPsec peers (a /28 each, every tenth overlapping an older one, half of them granted an
// exposure). Goal (README): ≤ 20 ms. Prints the time per build.
func BenchmarkBuild10kPeers(b *testing.B) {
	const n = 10000
	gw := testGateway(vpnv1.ProtocolIPsec)
	gw.Spec.ReverseExposures = nil
	peers := make([]vpnv1.VPNPeer, n)
	for i := range peers {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 12), byte(i >> 4), byte(i&15) << 4})
		subnets := []string{netip.PrefixFrom(a, 28).String()}
		if i%10 == 9 { // a /27 over itself and its older neighbour
			subnets = []string{netip.PrefixFrom(a, 27).Masked().String()}
		}
		var opts []gen.PeerMod
		if i%2 == 0 {
			opts = append(opts, gen.Grants("internal-api"))
		}
		p := ipsecPeer(fmt.Sprintf("p%05d", i), subnets, opts...)
		p.CreationTimestamp = metav1.NewTime(t0.Add(time.Duration(i) * time.Second))
		peers[i] = p
	}
	in := testInput(peers...)
	in.Gateway = gw
	in.ServiceCIDR = netip.MustParsePrefix("100.64.3.0/24")
	var m *Gateway
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		var errs []Error
		if m, errs = Build(in); len(errs) > 0 {
			b.Fatal(errs[0])
		}
	}
	per := time.Since(start) / time.Duration(b.N)
	dark := 0
	for _, p := range m.Peers {
		if !p.Authorization.Authorized {
			dark++
		}
	}
	b.ReportMetric(float64(per.Microseconds())/1000, "ms/build")
	b.Logf("model build + authorization, %d peers (%d dark, %d problems): %v per build (goal ≤ 20 ms)", n, dark, len(m.Problems), per.Round(time.Microsecond))
}
