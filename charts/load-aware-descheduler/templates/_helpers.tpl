{{/* The release's full name, used for every object. */}}
{{- define "lad.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "lad.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "lad.labels" -}}
{{ include "lad.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "lad.serviceAccountName" -}}
{{- default (include "lad.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/*
The configuration as the descheduler reads it: the user's (a mapping, the YAML string a Koordinator
ConfigMap holds, or that whole ConfigMap manifest) with leader election and the endpoint addresses set
to fit this release.
*/}}
{{- define "lad.config" -}}
{{- $config := .Values.config -}}
{{- if kindIs "string" $config -}}
{{- $config = fromYaml $config -}}
{{- end -}}
{{- if eq (get $config "kind" | toString) "ConfigMap" -}}
{{- /* A whole Koordinator ConfigMap manifest: its one data key holds the configuration. */ -}}
{{- $config = fromYaml (values $config.data | first) -}}
{{- end -}}
{{- $config = deepCopy $config -}}
{{- $_ := set $config "leaderElection" (dict "leaderElect" .Values.leaderElection.enabled "resourceName" .Values.leaderElection.resourceName "resourceNamespace" .Release.Namespace) -}}
{{- $_ := set $config "healthzBindAddress" (printf "0.0.0.0:%v" .Values.ports.healthz) -}}
{{- $_ := set $config "metricsBindAddress" (printf "0.0.0.0:%v" .Values.ports.metrics) -}}
{{- toYaml $config -}}
{{- end -}}
