// Package v1alpha1 is the legacy ipsec.bnerd.net API, frozen: IPsecGateway (a client's gateway
// and all its tunnels in one object) and ClusterLink (a service cluster plumbed into the transit
// fabric). The operator translates an IPsecGateway into the unified model (internal/legacy), so
// one validator, renderer and agent serve both groups.
//
// +kubebuilder:object:generate=true
// +groupName=ipsec.bnerd.net
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "ipsec.bnerd.net", Version: "v1alpha1"}

	// SchemeBuilder adds the types of this API to a scheme (no init registry: the types are
	// listed here).
	SchemeBuilder = (&scheme.Builder{GroupVersion: GroupVersion}).
			Register(&IPsecGateway{}, &IPsecGatewayList{}, &ClusterLink{}, &ClusterLinkList{})

	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
