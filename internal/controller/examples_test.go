package controller_test

import (
	"context"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testenv"
)

// TestPublishedExamplesApply: the manifests the product's documentation has shown
// (testdata/examples, kept verbatim) are accepted by the API server unchanged: users copied them.
func TestPublishedExamplesApply(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "examples", "*.yaml"))
	if len(paths) == 0 {
		t.Fatal("no testdata/examples")
	}
	ns := namespace(t)
	applied := 0
	for _, path := range paths {
		for _, obj := range objectsIn(t, path) {
			obj.SetNamespace(ns)
			if err := env.Client.Create(context.Background(), obj, client.DryRunAll); err != nil {
				t.Errorf("%s: %s %s refused: %v", filepath.Base(path), obj.GetKind(), obj.GetName(), err)
				continue
			}
			t.Logf("%s: %s %s accepted", filepath.Base(path), obj.GetKind(), obj.GetName())
			applied++
		}
	}
	if applied < 2 {
		t.Errorf("only %d example objects applied; the examples show a VPNGateway and a VPNPeer", applied)
	}
}

// objectsIn are the objects of a YAML file but a Kustomization.
func objectsIn(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, obj := range readYAML(t, path) {
		if obj.GetKind() != "Kustomization" {
			out = append(out, obj)
		}
	}
	return out
}

// TestSamplesApply: the samples the docs point at are accepted by the API server.
func TestSamplesApply(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "samples", "*.yaml"))
	ns := namespace(t)
	applied := 0
	for _, path := range paths {
		for _, obj := range objectsIn(t, path) {
			obj.SetNamespace(ns)
			if err := env.Client.Create(context.Background(), obj, client.DryRunAll); err != nil {
				t.Errorf("%s: %s %s refused: %v", filepath.Base(path), obj.GetKind(), obj.GetName(), err)
				continue
			}
			applied++
		}
	}
	if applied == 0 {
		t.Fatal("no sample applied")
	}
	t.Logf("%d sample objects accepted", applied)
}
