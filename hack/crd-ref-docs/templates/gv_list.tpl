{{- /*
  docs/reference/crds.md: the page. Templates adapted from crd-ref-docs v0.3.0's markdown
  templates (Apache-2.0): the unified group first, every type with an anchor of its group
  (two groups have a TunnelStatus), CEL rule messages shown, GitHub-flavoured markdown only.
*/ -}}
{{- define "gvList" -}}
{{- $groupVersions := . -}}
<!-- Generated from the Go types in api/ by hack/gen-crd-docs.sh (crd-ref-docs); `make generate` rewrites it. Do not edit. -->

# CRD reference

The custom resources of bnerd-vpn-operator, generated from the Go types in `api/` (their
comments and kubebuilder markers). **Validation** lists the OpenAPI constraints and, as
*Rule*, the messages of the CEL rules the API server enforces; the rules themselves are in
`config/crd/bases/`. Everything the API server cannot judge becomes a condition on the object:
see [the gateway's conditions](../operations.md#the-gateways-conditions).

## API groups
{{- range $groupVersions }}{{ if hasPrefix "vpn." .GroupVersionString }}
- {{ markdownRenderGVLink . }}: the unified API
{{- end }}{{ end }}
{{- range $groupVersions }}{{ if not (hasPrefix "vpn." .GroupVersionString) }}
- {{ markdownRenderGVLink . }}
{{- end }}{{ end }}
{{ range $groupVersions }}{{ if hasPrefix "vpn." .GroupVersionString }}
{{ template "gvDetails" . }}
{{ end }}{{ end }}
{{- range $groupVersions }}{{ if not (hasPrefix "vpn." .GroupVersionString) }}
{{ template "gvDetails" . }}
{{ end }}{{ end }}
{{- end -}}
