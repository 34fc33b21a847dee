{{- define "type" -}}
{{- $type := . -}}
{{- if markdownShouldRenderType $type -}}

{{ $parts := splitList "/" $type.Package -}}
<a id="{{ index $parts (sub (len $parts) 2) }}-{{ lower $type.Name }}"></a>

#### {{ $type.Name }}

{{ if $type.IsAlias }}_Underlying type:_ _{{ markdownRenderTypeLink $type.UnderlyingType }}_{{ end }}

{{ $type.Doc | replace "<" "&lt;" }}

{{ if $type.Validation -}}
_Validation:_
{{- range $type.Validation }}
- {{ . | trimSuffix ": {}" | replace "|" "\\|" }}
{{- end }}
{{- end }}

{{ with index $type.Markers "kubebuilder:validation:XValidation" -}}
_Rules:_
{{- range . }}
- {{ .Message | replace "<" "&lt;" }}
{{- end }}
{{- end }}

{{ if $type.References -}}
_Appears in:_
{{- range $type.SortedReferences }}
- {{ template "tlink" . }}
{{- end }}
{{- end }}

{{ if $type.Members -}}
| Field | Description | Default | Validation |
| --- | --- | --- | --- |
{{ if $type.GVK -}}
| `apiVersion` _string_ | `{{ $type.GVK.Group }}/{{ $type.GVK.Version }}` | | |
| `kind` _string_ | `{{ $type.GVK.Kind }}` | | |
{{ end -}}

{{ range $type.Members -}}
| `{{ .Name }}` _{{ template "ftype" .Type }}_ | {{ template "type_members" . }} | {{ .Default }} | {{ template "validation" . }} |
{{ end -}}

{{ end -}}

{{ if $type.EnumValues -}}
| Value | Description |
| --- | --- |
{{ range $type.EnumValues -}}
| `{{ .Name }}` | {{ template "doc" .Doc }} |
{{ end -}}
{{ end -}}

{{- end -}}
{{- end -}}

{{- /* validation: a field's OpenAPI constraints and the messages of its CEL rules, one cell */ -}}
{{- define "validation" -}}
{{- $out := list -}}
{{- range .Validation -}}
{{- if not (or (hasPrefix "items:XValidation" .) (hasPrefix "items:XIntOrString" .) (hasPrefix "XIntOrString" .) (hasPrefix "Type:" .)) -}}
{{- $out = append $out (trimSuffix ": {}" .) -}}
{{- end -}}
{{- end -}}
{{- range index .Markers "kubebuilder:validation:XValidation" -}}
{{- $out = append $out (printf "Rule: %s" (.Message | replace "<" "&lt;")) -}}
{{- end -}}
{{- range index .Markers "kubebuilder:validation:items:XValidation" -}}
{{- $out = append $out (printf "Rule (each item): %s" (.Message | replace "<" "&lt;")) -}}
{{- end -}}
{{- join " <br />" $out | replace "|" "\\|" -}}
{{- end -}}
