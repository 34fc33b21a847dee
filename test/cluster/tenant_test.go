package cluster

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// tenantRole is the shipped role a client's team gets in its namespace (config/rbac).
const tenantRole = "bnerd-vpn-tenant-edit"

// tenantName is the lab tenant's ServiceAccount in each namespace it is given.
const tenantName = "lab-tenant"

// tenant returns a client acting as the lab's tenant in namespace: a ServiceAccount bound to
// the shipped tenant role there and nothing else, which the suite impersonates. The attack
// steps act with it, so they show what a tenant can do, not what the cluster admin can.
func (l *lab) tenant(namespace string) (client.Client, error) {
	c, cancel := ctx(30 * time.Second)
	defer cancel()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: tenantName, Namespace: namespace}}
	if err := l.c.Create(c, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("the tenant's ServiceAccount: %w", err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: tenantName, Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: tenantRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: tenantName, Namespace: namespace}},
	}
	if err := l.c.Create(c, rb); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("the tenant's RoleBinding: %w", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", l.kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + namespace + ":" + tenantName}
	tc, err := client.New(cfg, client.Options{Scheme: l.c.Scheme()})
	if err != nil {
		return nil, err
	}
	// The binding is in force once the tenant can list its gateways.
	err = eventually(30*time.Second, func() error {
		c, cancel := ctx(10 * time.Second)
		defer cancel()
		var gws vpnv1.VPNGatewayList
		return tc.List(c, &gws, client.InNamespace(namespace))
	})
	return tc, err
}
