package model

import (
	"net/netip"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// Input is everything Build needs, already fetched by the caller.
type Input struct {
	Gateway *vpnv1.VPNGateway
	// Peers whose spec.gatewayRef names the gateway, in its namespace, any order. The caller
	// leaves out peers being deleted.
	Peers  []vpnv1.VPNPeer
	Config Config
	// ServiceCIDR is the gateway's service CIDR as assigned by the allocator.
	ServiceCIDR netip.Prefix
	// Services maps the exposure target Services' names to their ClusterIPs; a name missing
	// here is an error (TargetServiceNotFound), an invalid address TargetServiceHasNoClusterIP.
	Services map[string]netip.Addr
	// PublicAddress from the endpoint, empty until known.
	PublicAddress string
}

// Build validates the input into a Gateway, or returns why it cannot (never a partial model).
func Build(in Input) (*Gateway, []Error) { panic("TODO") }

// Authorize decides every peer's Authorized condition from the gateway spec and its peers
// alone (pure, no addresses needed), keyed by peer name. Problems are gateway-level findings
// (e.g. a reverse exposure granted to a peer whose subnets do not cover it, naming both peers).
func Authorize(gw *vpnv1.VPNGateway, peers []vpnv1.VPNPeer) (map[string]Decision, []Problem) {
	panic("TODO")
}
