// Package manifests writes Kubernetes objects as the manifests kubectl vpn prints: a YAML
// stream or a JSON List, without status or server fields.
package manifests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// Write writes objs in format yaml ("" too) or json.
func Write(w io.Writer, format string, objs []client.Object) error {
	var docs []map[string]any
	for _, obj := range objs {
		b, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return err
		}
		delete(m, "status")
		if md, ok := m["metadata"].(map[string]any); ok {
			delete(md, "creationTimestamp")
		}
		docs = append(docs, m)
	}
	switch format {
	case "yaml", "":
		var buf bytes.Buffer
		for _, d := range docs {
			b, err := yaml.Marshal(d)
			if err != nil {
				return err
			}
			buf.WriteString("---\n")
			buf.Write(b)
		}
		_, err := w.Write(buf.Bytes())
		return err
	case "json":
		list := map[string]any{"apiVersion": "v1", "kind": "List", "items": docs}
		b, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	return fmt.Errorf("output %q: yaml or json", format)
}
