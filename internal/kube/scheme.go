package kube

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// Scheme knows the built-in kinds and this operator's APIs (both groups): what the operator's manager, the
// gateway agent's client and the tests decode. It lives here, not in internal/operator, so
// the internet-facing agent links no reconciler or cloud code for it.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := vpnv1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := ipsecv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}
