package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterLinkSpec is one service cluster plumbed into the transit fabric.
type ClusterLinkSpec struct {
	// CIDRs of the service cluster (its pods and Services) reached through Via.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=18
	// +kubebuilder:validation:XValidation:rule="self.all(c, isCIDR(c) && cidr(c).ip().family() == 4 && cidr(c) == cidr(c).masked())",message="cidrs must be IPv4 network addresses in CIDR notation, e.g. 10.96.0.0/12"
	// +kubebuilder:validation:XValidation:rule="self.all(c, !isCIDR(c) || (cidr(c).prefixLength() > 0 && ['0.0.0.0/8', '127.0.0.0/8', '169.254.0.0/16', '224.0.0.0/4', '240.0.0.0/4'].all(r, !cidr(r).containsCIDR(cidr(c)) && !cidr(c).containsCIDR(cidr(r)))))",message="cidrs must not be 0.0.0.0/0 or cover 0.0.0.0/8, loopback, link-local, multicast or reserved addresses"
	// +listType=set
	CIDRs []string `json:"cidrs"`
	// Via is the next hop on the fabric toward the service cluster.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4 && ip(self).isGlobalUnicast()",message="via must be a unicast IPv4 address"
	Via string `json:"via"`
	// Description for people.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Description string `json:"description,omitempty"`
}

// ClusterLinkStatus says whether the link is in use and by which gateways.
type ClusterLinkStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Gateways (namespace/name) that route to the link's CIDRs and admit them as internal
	// sources: every gateway of the cluster while the link is Ready, none otherwise.
	// +optional
	Gateways []string `json:"gateways,omitempty"`
}

// ClusterLink is a service cluster plumbed into the transit fabric (cluster-scoped). While its
// Ready condition is True, every gateway routes its CIDRs via its next hop (a pod-network
// gateway whose pod is attached to the fabric; otherwise the node's routing), admits them as
// internal sources of reverse exposures and may expose targets inside them. A link overlapping an
// older peer's subnets, a gateway's service CIDR (or the pool), the cluster's own ranges or an
// older ready link is refused: Ready=False with a message naming both sides.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=vpn
// +kubebuilder:printcolumn:name="Via",type=string,JSONPath=`.spec.via`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterLink struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterLinkSpec   `json:"spec"`
	Status ClusterLinkStatus `json:"status,omitempty"`
}

// ClusterLinkList is a list of ClusterLinks.
//
// +kubebuilder:object:root=true
type ClusterLinkList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterLink `json:"items"`
}
