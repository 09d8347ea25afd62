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
to fit this release. Whatever cannot be read stops the install with a message naming `config`: helm's
fromYaml turns a parse error into an `Error:` key, which would install fine and crash-loop the pod.
*/}}
{{- define "lad.config" -}}
{{- $config := .Values.config -}}
{{- if kindIs "string" $config -}}
{{- $config = include "lad.parseConfig" (dict "text" $config "what" "config") | fromJson -}}
{{- end -}}
{{- if not (kindIs "map" $config) -}}
{{- fail (printf "config: expected a DeschedulerConfiguration (a mapping, its YAML text or a ConfigMap holding it), got a %s" (kindOf $config)) -}}
{{- end -}}
{{- if eq (get $config "kind" | toString) "ConfigMap" -}}
{{- /* A whole Koordinator ConfigMap manifest: its one data key holds the configuration. */ -}}
{{- $data := get $config "data" -}}
{{- if not (kindIs "map" $data) -}}
{{- fail "config: a ConfigMap must have `data` with one key holding the configuration" -}}
{{- end -}}
{{- if ne (len $data) 1 -}}
{{- fail (printf "config: a ConfigMap must hold the configuration under exactly one data key, found %d (%s)" (len $data) (keys $data | sortAlpha | join ", ")) -}}
{{- end -}}
{{- $key := keys $data | first -}}
{{- $text := get $data $key -}}
{{- if not (kindIs "string" $text) -}}
{{- fail (printf "config: ConfigMap data key %s must be a string holding the configuration" $key) -}}
{{- end -}}
{{- $config = include "lad.parseConfig" (dict "text" $text "what" (printf "config: ConfigMap data key %s" $key)) | fromJson -}}
{{- end -}}
{{- $config = deepCopy $config -}}
{{- /* The chart owns where the Lease lives and whether election is on; the user's timings are kept. */ -}}
{{- $election := get $config "leaderElection" | default dict -}}
{{- if not (kindIs "map" $election) -}}
{{- fail (printf "config: leaderElection must be a mapping (leaseDuration, renewDeadline, retryPeriod, ...), got a %s" (kindOf $election)) -}}
{{- end -}}
{{- $election = deepCopy $election -}}
{{- $_ := set $election "leaderElect" .Values.leaderElection.enabled -}}
{{- $_ := set $election "resourceName" .Values.leaderElection.resourceName -}}
{{- $_ := set $election "resourceNamespace" .Release.Namespace -}}
{{- $_ := set $config "leaderElection" $election -}}
{{- $_ := set $config "healthzBindAddress" (printf "0.0.0.0:%v" .Values.ports.healthz) -}}
{{- $_ := set $config "metricsBindAddress" (printf "0.0.0.0:%v" .Values.ports.metrics) -}}
{{- toYaml $config -}}
{{- end -}}

{{/*
YAML text (.text) parsed to a mapping, as JSON (templates return strings). Fails, naming .what, on text
that does not parse, that is not a mapping, or that repeats a top-level key (fromYaml keeps the last one
silently: a second `dryRun:` or a second ConfigMap data key would change what runs without a word).
Repeated keys deeper down are left to the descheduler's own strict loader, which the chart cannot see.
*/}}
{{- define "lad.parseConfig" -}}
{{- $seen := dict -}}
{{- range $line := regexFindAll "(?m)^[^\\s#\\-{}\\[\\]'\"][^:\\n]*:(\\s|$)" .text -1 -}}
{{- $name := regexReplaceAll ":\\s*$" $line "" | trim -}}
{{- if hasKey $seen $name -}}
{{- fail (printf "%s: key %q appears more than once; only one may be given (YAML parsers would silently keep the last)" $.what $name) -}}
{{- end -}}
{{- $_ := set $seen $name true -}}
{{- end -}}
{{- $data := regexFind "(?m)^data:[ \\t]*\\n(?:[ \\t]+.*(?:\\n|$)|[ \\t]*(?:\\n|$))*" .text -}}
{{- if $data -}}
{{- $indent := regexFind "(?m)^[ \\t]+[^\\s#]" $data | regexFind "^[ \\t]+" -}}
{{- $entries := dict -}}
{{- range $line := regexFindAll (printf "(?m)^%s[^\\s#][^:\\n]*:" $indent) $data -1 -}}
{{- $name := trimPrefix $indent $line | trimSuffix ":" | trim -}}
{{- if hasKey $entries $name -}}
{{- fail (printf "%s: ConfigMap data key %q appears more than once" $.what $name) -}}
{{- end -}}
{{- $_ := set $entries $name true -}}
{{- end -}}
{{- end -}}
{{- $parsed := fromYaml .text -}}
{{- if hasKey $parsed "Error" -}}
{{- fail (printf "%s: not valid YAML: %s" .what (get $parsed "Error")) -}}
{{- end -}}
{{- toJson $parsed -}}
{{- end -}}
