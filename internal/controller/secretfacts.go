package controller

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// secretFacts is all the operator needs to know of a Secret: whether it exists, its type,
// and which keys hold a non-empty value. Never a value.
type secretFacts struct {
	found bool
	typ   corev1.SecretType
	keys  map[string]bool
}

// SecretFacts reads Secrets' facts directly from the API server (the operator's cache holds
// only Secrets' metadata, never their data) and remembers them by resourceVersion: a Secret
// is read again only when the metadata cache shows it changed. Without this every pass over
// a gateway read each of its peers' Secrets, and every pass over a peer its own — several
// reads per peer while a gateway converges.
type SecretFacts struct {
	// Metadata reads Secrets' metadata (the manager's cache); API reads Secrets directly.
	Metadata, API client.Reader

	m sync.Map // types.NamespacedName -> *secretMemo
}

type secretMemo struct {
	resourceVersion string
	facts           secretFacts
}

// get returns the facts of the named Secret.
func (s *SecretFacts) get(ctx context.Context, key types.NamespacedName) (secretFacts, error) {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err := s.Metadata.Get(ctx, key, m)
	var opts []client.GetOption
	switch {
	case err == nil:
		if v, ok := s.m.Load(key); ok && v.(*secretMemo).resourceVersion == m.ResourceVersion {
			return v.(*secretMemo).facts, nil
		}
		// At least as new as the cached metadata: the API server answers from its watch cache
		// rather than with a quorum read of etcd.
		opts = append(opts, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: m.ResourceVersion}})
	case !apierrors.IsNotFound(err): // not yet in the cache: read it directly
		return secretFacts{}, err
	}
	sec := &corev1.Secret{}
	err = s.API.Get(ctx, key, sec, opts...)
	switch {
	case apierrors.IsNotFound(err):
		s.m.Delete(key)
		return secretFacts{}, nil
	case err != nil:
		return secretFacts{}, err
	}
	f := secretFacts{found: true, typ: sec.Type, keys: make(map[string]bool, len(sec.Data))}
	for k, v := range sec.Data {
		f.keys[k] = len(v) > 0
	}
	s.m.Store(key, &secretMemo{resourceVersion: sec.ResourceVersion, facts: f})
	return f, nil
}

// getAll returns the facts of the named Secrets (empty names left out) in namespace. The
// Secrets not known yet are read concurrently: a gateway's first pass would otherwise wait for
// one round trip per peer before it can write anything.
func (s *SecretFacts) getAll(ctx context.Context, namespace string, names []string) (map[string]secretFacts, error) {
	out := make(map[string]secretFacts, len(names))
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	limit := make(chan struct{}, 16)
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if seen[n] || n == "" {
			continue
		}
		seen[n] = true
		wg.Add(1)
		limit <- struct{}{}
		go func() {
			defer func() { <-limit; wg.Done() }()
			f, err := s.get(ctx, types.NamespacedName{Namespace: namespace, Name: n})
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("reading Secret %s: %w", n, err)
			}
			out[n] = f
		}()
	}
	wg.Wait()
	return out, firstErr
}
