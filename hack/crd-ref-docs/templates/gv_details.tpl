{{- define "gvDetails" -}}
{{- $gv := . -}}

## {{ $gv.GroupVersionString }}

{{ $gv.Doc | replace "<" "&lt;" }}

{{- if $gv.Kinds }}

### Resource types
{{- range $gv.SortedKinds }}
- {{ template "tlink" ($gv.TypeForKind .) }}
{{- end }}
{{ end }}

{{ range $gv.SortedTypes }}
{{ template "type" . }}
{{ end }}

{{- end -}}

{{- /* tlink: a link to a type; local types link to their anchor "<group>-<name>" (type.tpl) */ -}}
{{- define "tlink" -}}
{{- $l := markdownRenderTypeLink . -}}
{{- if and .Package (contains "](#" $l) -}}
{{- $parts := splitList "/" .Package -}}
{{- replace "](#" (printf "](#%s-" (index $parts (sub (len $parts) 2))) $l -}}
{{- else -}}
{{- $l -}}
{{- end -}}
{{- end -}}

{{- /* ftype: a field's type, lists and pointers of local types linked */ -}}
{{- define "ftype" -}}
{{- if and (eq .Kind 5) .UnderlyingType -}}
{{- template "tlink" .UnderlyingType }} array
{{- else if and (eq .Kind 4) .UnderlyingType -}}
{{- template "tlink" .UnderlyingType -}}
{{- else if eq .Kind 3 -}}
{{- markdownRenderType . -}}
{{- else -}}
{{- template "tlink" . -}}
{{- end -}}
{{- end -}}
