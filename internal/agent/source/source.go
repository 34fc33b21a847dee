// Package source feeds the agent its desired state: the rendered bundle from the gateway's
// ConfigMap and the data of the Secrets it references — from the API (in a cluster; a change
// is seen within a watch event) or from files (lab, tests).
package source

import (
	"fmt"
	"sort"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// Secrets is secret data by Secret name and key, held in memory only.
type Secrets map[string]map[string][]byte

// Get implements agent.Secrets.
func (s Secrets) Get(ref model.SecretKeyRef) ([]byte, error) {
	v, ok := s[ref.Name][ref.Key]
	if !ok || len(v) == 0 {
		return nil, fmt.Errorf("secret %q has no key %q", ref.Name, ref.Key)
	}
	return v, nil
}

// String never shows values.
func (s Secrets) String() string { return fmt.Sprintf("%d secrets (values redacted)", len(s)) }

// GoString never shows values.
func (s Secrets) GoString() string { return s.String() }

// secretNames are the Secrets a bundle references, sorted.
func secretNames(b *render.Bundle) []string {
	return children.SecretNames(b.Model)
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
