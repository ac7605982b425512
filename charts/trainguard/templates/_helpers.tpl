{{/*
Names are fixed, as in deploy/: the operator finds its Service, key Secret and webhook
configuration by these names.
*/}}
{{- define "trainguard.name" -}}trainguard-operator{{- end -}}

{{/*
Where the certificates come from: webhook.certificates.source, with auto resolved to certManager
when the cluster serves cert-manager.io/v1 (helm install, Argo CD) and to selfManaged otherwise.
*/}}
{{- define "trainguard.certSource" -}}
{{- $source := .Values.webhook.certificates.source -}}
{{- if eq $source "auto" -}}
{{- if .Capabilities.APIVersions.Has "cert-manager.io/v1" }}certManager{{ else }}selfManaged{{ end -}}
{{- else -}}
{{ $source }}
{{- end -}}
{{- end -}}

{{- define "trainguard.tlsSecret" -}}
{{- if eq (include "trainguard.certSource" .) "certManager" -}}
trainguard-operator-tls
{{- else -}}
{{ required "webhook.certificates.secretName is required with source: secret" .Values.webhook.certificates.secretName }}
{{- end -}}
{{- end -}}

{{- define "trainguard.selectorLabels" -}}
app.kubernetes.io/name: trainguard
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "trainguard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
app.kubernetes.io/name: trainguard
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: trainguard
{{- end -}}

{{/*
The labels that carry an alert's grade (dict "root" . "grade" "P1"): priority always, severity in the
platform's style (alerts.severityStyle). The mapping is trainguard.catalog.severity.MAPPED_SEVERITY's;
tests/packaging/test_operator_rules.py pins the two.
*/}}
{{- define "trainguard.gradeLabels" -}}
{{- $mapped := dict "P0" "critical" "P1" "warning" "P2" "warning" "P3" "none" -}}
priority: {{ .grade }}
severity: {{ eq .root.Values.alerts.severityStyle "mapped" | ternary (index $mapped .grade) .grade }}
{{- end -}}

{{/*
podLabels on the operator's pods; the chart's own labels (the Deployment's selector among them) cannot
be overridden, and naming one fails with the value's path.
*/}}
{{- define "trainguard.podLabels" -}}
{{- $own := include "trainguard.labels" . | fromYaml }}
{{- $_ := set $own "app.kubernetes.io/component" "operator" }}
{{- range $key, $_ := .Values.podLabels }}
{{- if hasKey $own $key }}
{{- fail (printf "podLabels.%s: the chart sets this label on its pods itself (the Deployment's selector and the release's labels); use another key" $key) }}
{{- end }}
{{- end }}
{{- with .Values.podLabels }}
{{- toYaml . }}
{{- end }}
{{- end -}}

{{/*
The pod's and the container's securityContext: the values, or the chart's hardening where the value is
absent: `helm upgrade --reuse-values` from a chart that did not have it takes the old chart's values,
and that must not drop the hardening. A field set to null is left out; a whole value set to null is absent.
*/}}
{{- define "trainguard.podSecurityContext" -}}
{{- if hasKey .Values "podSecurityContext" -}}
{{- with .Values.podSecurityContext }}{{ toYaml . }}{{ end -}}
{{- else -}}
fsGroup: 65532
runAsGroup: 65532
runAsNonRoot: true
runAsUser: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}
{{- end -}}

{{- define "trainguard.securityContext" -}}
{{- if hasKey .Values "securityContext" -}}
{{- with .Values.securityContext }}{{ toYaml . }}{{ end -}}
{{- else -}}
allowPrivilegeEscalation: false
capabilities:
  drop:
  - ALL
readOnlyRootFilesystem: true
runAsNonRoot: true
seccompProfile:
  type: RuntimeDefault
{{- end -}}
{{- end -}}

{{- define "trainguard.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/*
Argo CD sync waves: the CRDs (crds/, annotated -1 by `trainguard crds`) apply first, then RBAC (1), then the
operator and what it needs (2), then the policies that use the CRDs (3). Helm ignores them.
*/}}
{{- define "trainguard.syncWave" -}}
argocd.argoproj.io/sync-wave: {{ . | quote }}
{{- end -}}

{{/*
The objects of one of files/, each a byte copy of the deploy/ file of the same name, as documents
(dict "root" . "file" "files/NAME"): the release's namespace in place of trainguard-system, in
metadata, in the subjects of bindings and FlowSchemas and in the operator's username that the
Secret-write policy matches; a FlowSchema's priority level from "priorityLevel" when given; the
chart's labels and Argo CD sync wave 1 added (RBAC and policy before the operator).
*/}}
{{- define "trainguard.deployFile" -}}
{{- $root := .root }}
{{- $ns := $root.Release.Namespace }}
{{- $labels := include "trainguard.labels" $root | fromYaml }}
{{- $wave := include "trainguard.syncWave" "1" | fromYaml }}
{{- $text := $root.Files.Get .file }}
{{- if not $text }}
{{- fail (printf "%s is missing or empty: run `make chart`" .file) }}
{{- end }}
{{- $text = $text | replace "system:serviceaccount:trainguard-system:" (printf "system:serviceaccount:%s:" $ns) }}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" $text -1 }}
{{- $obj := fromYaml $doc }}
{{- if hasKey $obj "Error" }}
{{- fail (printf "%s: %s" $.file $obj.Error) }}
{{- end }}
{{- if $obj }}
{{- if eq (dig "metadata" "namespace" "" $obj) "trainguard-system" }}
{{- $_ := set $obj.metadata "namespace" $ns }}
{{- end }}
{{- $_ := set $obj.metadata "labels" (merge (dict) $labels ($obj.metadata.labels | default dict)) }}
{{- $_ := set $obj.metadata "annotations" (merge (dict) $wave ($obj.metadata.annotations | default dict)) }}
{{- range $subject := ($obj.subjects | default list) }}
{{- if eq ($subject.namespace | default "") "trainguard-system" }}
{{- $_ := set $subject "namespace" $ns }}
{{- end }}
{{- end }}
{{- range $rule := (dig "spec" "rules" (list) $obj) }}
{{- range $subject := ($rule.subjects | default list) }}
{{- if eq (dig "serviceAccount" "namespace" "" $subject) "trainguard-system" }}
{{- $_ := set $subject.serviceAccount "namespace" $ns }}
{{- end }}
{{- end }}
{{- end }}
{{- if eq $obj.kind "FlowSchema" }}
{{- if $.priorityLevel }}
{{- $_ := set $obj.spec.priorityLevelConfiguration "name" $.priorityLevel }}
{{- end }}
{{- /* Kubernetes 1.28 serves FlowSchemas as v1beta3 only, the same fields */}}
{{- if semverCompare "<1.29-0" $root.Capabilities.KubeVersion.Version }}
{{- $_ := set $obj "apiVersion" "flowcontrol.apiserver.k8s.io/v1beta3" }}
{{- end }}
{{- end }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end -}}

{{- /* --object-labels: objectLabels as KEY=VALUE,... in key order (empty for none) */}}
{{- define "trainguard.objectLabels" -}}
{{- $pairs := list -}}
{{- range $k := keys .Values.objectLabels | sortAlpha -}}
{{- $pairs = append $pairs (printf "%s=%s" $k (index $.Values.objectLabels $k)) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}
