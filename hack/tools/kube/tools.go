//go:build tools

// Package tools pins the Kubernetes binaries the tests run (kube-apiserver for envtest).
// It lives in its own module so the project's go.mod never depends on k8s.io/kubernetes.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
