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

{{- define "trainguard.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/*
Argo CD sync waves: the CRDs (crds/, no annotation: wave 0) apply first, then RBAC (1), then the
operator and what it needs (2), then the policies that use the CRDs (3). Helm ignores them.
*/}}
{{- define "trainguard.syncWave" -}}
argocd.argoproj.io/sync-wave: {{ . | quote }}
{{- end -}}
