package labcloud

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NADCRD is a minimal NetworkAttachmentDefinition CRD (k8s.cni.cncf.io/v1, what Multus ships,
// without its schema): where Multus is not installed, the operator's NADs need it.
func NADCRD() *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "network-attachment-definitions.k8s.cni.cncf.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "k8s.cni.cncf.io", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "network-attachment-definitions", Singular: "network-attachment-definition",
				Kind: "NetworkAttachmentDefinition", ListKind: "NetworkAttachmentDefinitionList", ShortNames: []string{"net-attach-def"}},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}}}},
		},
	}
}

// InstallNADCRD creates NADCRD (an existing one is kept) and waits until NADs can be listed.
func InstallNADCRD(ctx context.Context, cfg *rest.Config) error {
	sch := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(sch); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: sch})
	if err != nil {
		return err
	}
	if err := c.Create(ctx, NADCRD()); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the NetworkAttachmentDefinition CRD: %w", err)
	}
	l := &unstructured.UnstructuredList{}
	l.SetAPIVersion("k8s.cni.cncf.io/v1")
	l.SetKind("NetworkAttachmentDefinitionList")
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		err := c.List(ctx, l)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the NetworkAttachmentDefinition CRD is not served: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
