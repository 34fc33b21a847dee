// Package manifests reads Kubernetes objects from YAML: a file or stream of documents, or a
// kustomization directory with its resources followed (plain resources only: what config/
// uses). For tests that check install manifests against each other and the API server.
package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Decode returns the objects of a multi-document YAML stream (empty documents skipped).
func Decode(data []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, err
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// File returns the objects of a YAML file.
func File(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	objs, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return objs, nil
}

// Kustomization returns the objects of a kustomization directory, following its resources
// (files and directories; patches, images and generators are not applied).
func Kustomization(dir string) ([]*unstructured.Unstructured, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range k.Resources {
		p := filepath.Join(dir, r)
		var objs []*unstructured.Unstructured
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			objs, err = Kustomization(p)
			if err != nil {
				return nil, err
			}
		} else if objs, err = File(p); err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}
