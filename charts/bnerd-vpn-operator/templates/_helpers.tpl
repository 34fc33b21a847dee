{{/* The operator's name: fixed, as config/default (one operator per cluster). */}}
{{- define "bnerd-vpn-operator.name" -}}bnerd-vpn-operator{{- end -}}

{{/* Labels every object of the chart carries besides its own. */}}
{{- define "bnerd-vpn-operator.labels" -}}
app.kubernetes.io/name: bnerd-vpn-operator
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* The operator's flags, from the values. */}}
{{- define "bnerd-vpn-operator.args" -}}
{{- $v := .Values -}}
{{- if $v.operator.leaderElection.enabled }}
- --leader-elect
- --leader-elect-lease-duration={{ $v.operator.leaderElection.leaseDuration }}
- --leader-elect-renew-deadline={{ $v.operator.leaderElection.renewDeadline }}
- --leader-elect-retry-period={{ $v.operator.leaderElection.retryPeriod }}
{{- end }}
- --service-cidr-pool={{ $v.network.serviceCIDRPool }}
{{- $agentImage := $v.gateway.agentImage | default (printf "bnerd-vpn-gateway:%s" .Chart.AppVersion) }}
- --agent-image={{ $agentImage }}
- --strongswan-image={{ $v.gateway.strongswanImage | default $agentImage }}
{{- with $v.gateway.imagePullPolicy }}
- --image-pull-policy={{ . }}
{{- end }}
{{- if $v.gateway.userspaceDataplane }}
- --userspace-dataplane
{{- end }}
{{- if $v.gateway.standby }}
- --gateway-standby
{{- end }}
{{- /* only when it differs from the operator's default (5) */}}
{{- if ne (int $v.gateway.rolloutConcurrency) 5 }}
- --gateway-rollout-concurrency={{ $v.gateway.rolloutConcurrency }}
{{- end }}
{{- with $v.gateway.pod }}
{{- with .nodeSelector }}
{{- $pairs := list }}
{{- range $k, $val := . }}{{ $pairs = append $pairs (printf "%s=%s" $k $val) }}{{ end }}
- {{ printf "--gateway-node-selector=%s" (join "," $pairs) | quote }}
{{- end }}
{{- with .tolerations }}
- {{ printf "--gateway-tolerations=%s" (toJson .) | quote }}
{{- end }}
{{- /* only when it differs from the operator's default (15s) */}}
{{- if and .nodeLossToleration (ne (toString .nodeLossToleration) "15s") }}
- --gateway-node-loss-toleration={{ .nodeLossToleration }}
{{- end }}
{{- with .priorityClassName }}
- --gateway-priority-class={{ . }}
{{- end }}
{{- with .imagePullSecrets }}
{{- $names := list }}
{{- range . }}{{ $names = append $names .name }}{{ end }}
- --gateway-image-pull-secrets={{ join "," $names }}
{{- end }}
{{- /* only what differs from the operator's defaults (50m, 64Mi; limit 256Mi) */}}
{{- $req := .resources.requests | default dict }}
{{- $lim := .resources.limits | default dict }}
{{- if ne (toString ($req.cpu | default "")) "50m" }}
- --gateway-cpu-request={{ $req.cpu | default "" }}
{{- end }}
{{- if ne (toString ($req.memory | default "")) "64Mi" }}
- --gateway-memory-request={{ $req.memory | default "" }}
{{- end }}
{{- with $lim.cpu }}
- --gateway-cpu-limit={{ . }}
{{- end }}
{{- if ne (toString ($lim.memory | default "")) "256Mi" }}
- --gateway-memory-limit={{ $lim.memory | default "" }}
{{- end }}
{{- end }}
{{- with $v.network.internalSourceCIDRs }}
- --internal-source-cidrs={{ join "," . }}
{{- end }}
{{- with $v.network.clusterPodCIDRs }}
- --cluster-pod-cidrs={{ join "," . }}
{{- end }}
{{- with $v.network.clusterServiceCIDRs }}
- --cluster-service-cidrs={{ join "," . }}
{{- end }}
{{- with $v.network.nodeCIDRs }}
- --node-cidrs={{ join "," . }}
{{- end }}
{{- with $v.network.allowedTargetCIDRs }}
- --allowed-target-cidrs={{ join "," . }}
{{- end }}
{{- with $v.network.hostNetworkNamespaceSelector }}
- --host-network-namespace-selector={{ . }}
{{- end }}
{{- with $v.network.metricsNamespaceSelector }}
- --metrics-namespace-selector={{ . }}
{{- end }}
{{- /* the operator's defaults are not repeated as flags (the chart renders the kustomize install) */}}
{{- if ne (int $v.network.maxGatewaysPerNamespace) 32 }}
- --max-gateways-per-namespace={{ $v.network.maxGatewaysPerNamespace }}
{{- end }}
{{- if ne (int $v.network.maxServiceAddressesPerNamespace) 4096 }}
- --max-service-addresses-per-namespace={{ $v.network.maxServiceAddressesPerNamespace }}
{{- end }}
{{- if $v.openstack.enabled }}
- --openstack-clouds-yaml=/etc/openstack/{{ $v.openstack.cloudsSecretKey }}
- --openstack-cloud={{ $v.openstack.cloud }}
- --openstack-network-id={{ $v.openstack.networkID }}
{{- with $v.openstack.subnetID }}
- --openstack-subnet-id={{ . }}
{{- end }}
- --openstack-nad-master={{ $v.openstack.nadMaster }}
- --openstack-port-binding={{ $v.openstack.portBinding }}
{{- with $v.openstack.resync }}
- --openstack-resync={{ . }}
{{- end }}
{{- with $v.openstack.nadConfigTemplate }}
- {{ printf "--openstack-nad-config-template=%s" . | quote }}
{{- end }}
{{- end }}
{{- with $v.operator.gatewayNamespaces }}
- --gateway-namespaces={{ join "," . }}
{{- end }}
{{- range $v.operator.extraArgs }}
- {{ . }}
{{- end }}
{{- end -}}
