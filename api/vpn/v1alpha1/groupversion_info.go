// Package v1alpha1 is the unified, protocol-neutral API of bnerd-vpn-operator:
// VPNGateway (one client gateway pod) and VPNPeer (one remote party of it, with
// its own authorization).
//
// +kubebuilder:object:generate=true
// +groupName=vpn.bnerd.net
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "vpn.bnerd.net", Version: "v1alpha1"}

	// SchemeBuilder adds the types of this API to a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func init() {
	SchemeBuilder.Register(&VPNGateway{}, &VPNGatewayList{}, &VPNPeer{}, &VPNPeerList{})
}
