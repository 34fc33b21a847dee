{{- define "type_members" -}}
{{- $field := . -}}
{{- if eq $field.Name "metadata" -}}
Refer to Kubernetes API documentation for fields of `metadata`.
{{- else -}}
{{ template "doc" $field.Doc }}
{{- end -}}
{{- end -}}

{{- /* doc: a comment as one table cell: "<" escaped, paragraphs kept, lines joined */ -}}
{{- define "doc" -}}
{{- . | replace "<" "&lt;" | replace "|" "\\|" | replace "\n\n" " <br />" | replace "\n" " " -}}
{{- end -}}
