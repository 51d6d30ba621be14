{{/* Name of the chart, or nameOverride. */}}
{{- define "lockscope.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release-chart, unless the release name holds the chart's. */}}
{{- define "lockscope.fullname" -}}
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

{{- define "lockscope.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "lockscope.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "lockscope.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lockscope.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The Secret the chart creates for the Redis URL and the operator's credentials. */}}
{{- define "lockscope.secretName" -}}
{{- include "lockscope.fullname" . }}
{{- end }}

{{/* Whether the chart creates operator credentials from values. */}}
{{- define "lockscope.createOperator" -}}
{{- $o := .Values.operator }}
{{- if and (not $o.existingSecret) (or $o.user $o.password $o.token $o.tokens) }}true{{ end }}
{{- end }}

{{/* Whether a tokens file is mounted. */}}
{{- define "lockscope.tokensFile" -}}
{{- $o := .Values.operator }}
{{- if or (and $o.existingSecret $o.tokensFile) (and (not $o.existingSecret) $o.tokens) }}true{{ end }}
{{- end }}

{{/* The Secret that holds the operator's credentials, or "". */}}
{{- define "lockscope.operatorSecret" -}}
{{- if .Values.operator.existingSecret }}{{ .Values.operator.existingSecret }}
{{- else if include "lockscope.createOperator" . }}{{ include "lockscope.secretName" . }}
{{- end }}
{{- end }}

{{/*
The soft memory limit in MiB that lockscope applies (README: the documented
memory bound): --memory-limit-mb, or 64 MiB + 1 MiB per 1024 --max-keys.
*/}}
{{- define "lockscope.memoryLimitMiB" -}}
{{- $c := .Values.config }}
{{- if and $c.memoryLimitMb (gt (int $c.memoryLimitMb) 0) }}
{{- int $c.memoryLimitMb }}
{{- else }}
{{- $keys := 200000 }}
{{- if $c.maxKeys }}{{ $keys = int $c.maxKeys }}{{ end }}
{{- add 64 (div $keys 1024) }}
{{- end }}
{{- end }}

{{- define "lockscope.resources" -}}
{{- if .Values.resources }}
{{- toYaml .Values.resources }}
{{- else }}
{{- $l := int (include "lockscope.memoryLimitMiB" .) }}
requests:
  cpu: 100m
  memory: {{ add $l 32 }}Mi
limits:
  memory: {{ div (mul $l 3) 2 }}Mi
{{- end }}
{{- end }}

{{/* Host names the dashboard answers to: localhost, the Service's names, and config.allowedHosts. */}}
{{- define "lockscope.allowedHosts" -}}
{{- $svc := include "lockscope.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $hosts := list "localhost" $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) }}
{{- concat $hosts .Values.config.allowedHosts | uniq | join "," }}
{{- end }}
