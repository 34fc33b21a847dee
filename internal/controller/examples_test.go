package controller_test

import (
	"context"
	"path/filepath"
	"testing"

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
	if applied := dryRunCreate(t, paths); applied < 2 {
		t.Errorf("only %d example objects applied; the examples show a VPNGateway and a VPNPeer", applied)
	}
}

// TestSamplesApply: the samples the docs point at are accepted by the API server.
func TestSamplesApply(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "samples", "*.yaml"))
	applied := dryRunCreate(t, paths)
	if applied == 0 {
		t.Fatal("no sample applied")
	}
	t.Logf("%d sample objects accepted", applied)
}

// dryRunCreate creates every object of the files (Kustomizations left out) in a namespace of
// its own with a server-side dry run, failing t for each the API server refuses; it returns how
// many it accepted.
func dryRunCreate(t *testing.T, paths []string) int {
	t.Helper()
	ns := namespace(t)
	applied := 0
	for _, path := range paths {
		for _, obj := range readYAML(t, path) {
			if obj.GetKind() == "Kustomization" {
				continue
			}
			obj.SetNamespace(ns)
			if err := env.Client.Create(context.Background(), obj, client.DryRunAll); err != nil {
				t.Errorf("%s: %s %s refused: %v", filepath.Base(path), obj.GetKind(), obj.GetName(), err)
				continue
			}
			t.Logf("%s: %s %s accepted", filepath.Base(path), obj.GetKind(), obj.GetName())
			applied++
		}
	}
	return applied
}
