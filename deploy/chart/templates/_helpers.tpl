{{/* Names and labels. */}}
{{- define "modelplane.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "modelplane.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "modelplane.selectorLabels" -}}
app.kubernetes.io/name: {{ include "modelplane.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "modelplane.labels" -}}
{{ include "modelplane.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "modelplane.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "modelplane.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The leader Lease: the release's own name, so that two releases (two shards)
in one namespace never share one, and the RBAC can name it.
*/}}
{{- define "modelplane.leaseName" -}}
{{- include "modelplane.fullname" . -}}
{{- end -}}

{{/*
The label selector the alert rules put on every series: the job Prometheus
scrapes the operator as. A ServiceMonitor names the job after the Service.
*/}}
{{- define "modelplane.alertSelector" -}}
{{- $job := .Values.prometheusRule.job | default (printf "%s-metrics" (include "modelplane.fullname" .)) -}}
job={{ $job | quote }}
{{- end -}}
