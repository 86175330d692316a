{{/* The chart name, or nameOverride. */}}
{{- define "karpenter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of the Deployment, Service and ClusterRoles: fullnameOverride, else the release name when
it already contains the chart name ("karpenter" for a release named karpenter), else
"<release>-<chart>". Cut to 63 characters (DNS label).
*/}}
{{- define "karpenter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* chart-version, for the helm.sh/chart label. */}}
{{- define "karpenter.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels that pick the controller pods. They are part of the Deployment's immutable selector and
match the upstream chart's, so `helm upgrade` can take over an upstream release in place.
*/}}
{{- define "karpenter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "karpenter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every resource. */}}
{{- define "karpenter.labels" -}}
helm.sh/chart: {{ include "karpenter.chart" . }}
{{ include "karpenter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* metadata.labels and metadata.annotations of every resource; call with nindent 2. */}}
{{- define "karpenter.metadata" -}}
labels:
  {{- include "karpenter.labels" . | nindent 2 }}
{{- with .Values.additionalAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The ServiceAccount the controller runs as. */}}
{{- define "karpenter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "karpenter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* <repository>:<tag, default appVersion>[@<digest>] */}}
{{- define "karpenter.controller.image" -}}
{{- $image := .Values.controller.image }}
{{- $ref := printf "%s:%s" $image.repository (toString (default .Chart.AppVersion $image.tag)) }}
{{- if $image.digest }}
{{- $ref = printf "%s@%s" $ref $image.digest }}
{{- end }}
{{- $ref }}
{{- end }}

{{/* The settings.clusterName guard: every template that needs the setting includes it. */}}
{{- define "karpenter.requireClusterName" -}}
{{- if not .Values.settings.clusterName }}
{{- fail "settings.clusterName is required: set it to your EKS cluster name (--set settings.clusterName=my-cluster)" }}
{{- end }}
{{- end }}

{{/*
"Name=value,..." for a feature-gate map. Called with (list <map> <list of (Name key default)>);
a gate missing from the map (or null) gets its default.
*/}}
{{- define "karpenter.gates" -}}
{{- $values := index . 0 | default dict }}
{{- $out := list }}
{{- range $gate := index . 1 }}
{{- $v := index $values (index $gate 1) }}
{{- if kindIs "invalid" $v }}
{{- $v = index $gate 2 }}
{{- end }}
{{- $out = append $out (printf "%s=%v" (index $gate 0) $v) }}
{{- end }}
{{- join "," $out }}
{{- end }}

{{/* FEATURE_GATES, in the upstream order. */}}
{{- define "karpenter.featureGates" -}}
{{- include "karpenter.gates" (list .Values.settings.featureGates (list
  (list "ReservedCapacity" "reservedCapacity" true)
  (list "SpotToSpotConsolidation" "spotToSpotConsolidation" false)
  (list "NodeRepair" "nodeRepair" false)
  (list "NodeOverlay" "nodeOverlay" false)
  (list "StaticCapacity" "staticCapacity" false)
  (list "CapacityBuffer" "capacityBuffer" false))) }}
{{- end }}

{{/* AWS_FEATURE_GATES. */}}
{{- define "karpenter.awsFeatureGates" -}}
{{- include "karpenter.gates" (list .Values.settings.awsFeatureGates (list
  (list "NodeClassCEL" "nodeClassCEL" false))) }}
{{- end }}

{{/*
The env entries of settings.*, in a fixed order, with upstream's variable names. A setting that is
null or an empty string is left out (the controller's default applies); any other value is always
passed, false and 0 included.
*/}}
{{- define "karpenter.settingsEnv" -}}
{{- $s := .Values.settings }}
{{- range $entry := list
  (list "CLUSTER_NAME" $s.clusterName)
  (list "CLUSTER_ENDPOINT" $s.clusterEndpoint)
  (list "CLUSTER_CA_BUNDLE" $s.clusterCABundle)
  (list "ISOLATED_VPC" $s.isolatedVPC)
  (list "EKS_CONTROL_PLANE" $s.eksControlPlane)
  (list "VM_MEMORY_OVERHEAD_PERCENT" $s.vmMemoryOverheadPercent)
  (list "INTERRUPTION_QUEUE" $s.interruptionQueue)
  (list "RESERVED_ENIS" $s.reservedENIs)
  (list "ENABLE_ZONAL_SHIFT" $s.enableZonalShift)
  (list "BATCH_MAX_DURATION" $s.batchMaxDuration)
  (list "BATCH_IDLE_DURATION" $s.batchIdleDuration)
  (list "PREFERENCE_POLICY" $s.preferencePolicy)
  (list "MIN_VALUES_POLICY" $s.minValuesPolicy)
  (list "IGNORE_DRA_REQUESTS" $s.ignoreDRARequests)
  (list "DISABLE_CLUSTER_STATE_OBSERVABILITY" $s.disableClusterStateObservability)
  (list "DISABLE_DRY_RUN" $s.disableDryRun)
  (list "AMI_REFRESH_INTERVAL" $s.amiRefreshInterval)
  (list "SUBNET_REFRESH_INTERVAL" $s.subnetRefreshInterval)
  (list "CONSOLIDATION_REPLACEMENTS" $s.consolidationReplacements) }}
{{- $value := index $entry 1 }}
{{- if and (not (kindIs "invalid" $value)) (ne (toString $value) "") }}
- name: {{ index $entry 0 }}
  value: {{ toString $value | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
.Values.affinity, where a podAffinity or podAntiAffinity term (required, or the podAffinityTerm of
a preferred one) without a labelSelector gets one that selects this release's controller pods.
Returns YAML.
*/}}
{{- define "karpenter.affinity" -}}
{{- $affinity := deepCopy (.Values.affinity | default dict) }}
{{- $selector := dict "matchLabels" (include "karpenter.selectorLabels" . | fromYaml) }}
{{- range $kind := list "podAffinity" "podAntiAffinity" }}
{{- with index $affinity $kind }}
{{- range $term := .requiredDuringSchedulingIgnoredDuringExecution | default list }}
{{- if not $term.labelSelector }}
{{- $_ := set $term "labelSelector" $selector }}
{{- end }}
{{- end }}
{{- range $weighted := .preferredDuringSchedulingIgnoredDuringExecution | default list }}
{{- if and $weighted.podAffinityTerm (not $weighted.podAffinityTerm.labelSelector) }}
{{- $_ := set $weighted.podAffinityTerm "labelSelector" $selector }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $affinity }}
{{- end }}

{{/*
Copies of topology spread constraints where one without a labelSelector gets one that selects
this release's controller pods. Called with
(list <root context> <terms>); returns YAML.
*/}}
{{- define "karpenter.withPodSelector" -}}
{{- $root := index . 0 }}
{{- $terms := list }}
{{- range $term := index . 1 }}
{{- $copy := deepCopy $term }}
{{- if not $copy.labelSelector }}
{{- $_ := set $copy "labelSelector" (dict "matchLabels" (include "karpenter.selectorLabels" $root | fromYaml)) }}
{{- end }}
{{- $terms = append $terms $copy }}
{{- end }}
{{- toYaml $terms }}
{{- end }}

{{/* A map without its null and empty-map/empty-list/empty-string entries; returns YAML. */}}
{{- define "karpenter.pruned" -}}
{{- $out := dict }}
{{- range $k, $v := . }}
{{- if or (kindIs "bool" $v) (kindIs "float64" $v) (kindIs "int" $v) (kindIs "int64" $v) $v }}
{{- $_ := set $out $k $v }}
{{- end }}
{{- end }}
{{- if $out }}
{{- toYaml $out }}
{{- end }}
{{- end }}
