package gen

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// ReconciledIPsecGateway is the legacy IPsecGateway acme/acme as the API server returns it once
// the operator has reconciled it: service CIDR 100.64.7.0/24 allocated, virtual IPs assigned to
// its exposures (web, db) and reverse exposure (printer), public address 198.51.100.7 known,
// and each of tunnels Established. It is what `kubectl vpn migrate` is tested with, by its
// plan and through the whole command.
//
// tunnels names the tunnels to add, in order, from two: "hq" (one remote subnet) and "branch"
// (two); each refers to the Secret <tunnel>-psk for its key.
func ReconciledIPsecGateway(tunnels ...string) *ipsecv1.IPsecGateway {
	g := &ipsecv1.IPsecGateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "acme", Generation: 3, UID: "legacy-uid"},
		Spec: ipsecv1.IPsecGatewaySpec{
			Mode:     vpnv1.ModeSNAT,
			Endpoint: vpnv1.Endpoint{FloatingIPPool: DefaultFloatingIPPool},
			Exposures: []vpnv1.Exposure{
				{Name: "web", Target: vpnv1.ExposureTarget{Service: &vpnv1.ServiceRef{Name: "web"}, Ports: vpnv1.Ports(Port(443))}},
				{Name: "db", Target: vpnv1.ExposureTarget{Address: "10.0.0.7", Ports: vpnv1.Ports(Port(5432))}, VirtualIP: "100.64.7.20"},
			},
			ReverseExposures: []vpnv1.ReverseExposure{
				{Name: "printer", Target: vpnv1.ReverseExposureTarget{Address: "192.168.10.50", Ports: vpnv1.Ports(Port(9100))}},
			},
			IKE: vpnv1.IKESettings{Version: 2, Proposals: []string{"aes256gcm16-prfsha256-ecp256"}, RekeyTime: &metav1.Duration{Duration: 8 * time.Hour}},
		},
		Status: ipsecv1.IPsecGatewayStatus{
			ObservedGeneration: 3,
			ServiceCIDR:        "100.64.7.0/24",
			PublicAddress:      "198.51.100.7",
			Exposures:          []vpnv1.ExposureStatus{{Name: "web", VirtualIP: "100.64.7.10"}, {Name: "db", VirtualIP: "100.64.7.20"}},
			ReverseExposures:   []vpnv1.ExposureStatus{{Name: "printer", VirtualIP: "100.64.7.200", Service: "acme-printer", Ports: []string{"9100/TCP"}}},
		},
	}
	for _, t := range tunnels {
		site, ok := legacySites[t]
		if !ok {
			panic("gen.ReconciledIPsecGateway: no tunnel " + t + " (hq or branch)")
		}
		g.Spec.Tunnels = append(g.Spec.Tunnels, ipsecv1.Tunnel{
			Name:          t,
			Peer:          vpnv1.IPsecRemote{Address: site.address, ID: t + ".acme.example"},
			RemoteSubnets: append([]string(nil), site.subnets...),
			ESP:           vpnv1.ESPSettings{Proposals: []string{"aes256gcm16-ecp256"}},
			PSKSecretRef:  vpnv1.SecretKeyRef{Name: t + "-psk", Key: PSKKey},
		})
		g.Status.Tunnels = append(g.Status.Tunnels, ipsecv1.TunnelStatus{Name: t, State: "Established"})
	}
	return g
}

// legacySites are the tunnels ReconciledIPsecGateway knows: the remote's address and subnets.
var legacySites = map[string]struct {
	address string
	subnets []string
}{
	"hq":     {"203.0.113.9", []string{"192.168.10.0/24"}},
	"branch": {"203.0.113.10", []string{"10.30.0.0/16", "10.31.0.0/16"}},
}
