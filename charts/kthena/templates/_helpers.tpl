{{/*
Labels of every object: Go Kthena's set (charts/kthena/templates/_helpers.tpl). Go renders
the router from its `networking` subchart and the controller-manager from its `workload`
subchart, so `app.kubernetes.io/name` is `networking` or `workload`; this chart keeps those
values so that the Deployments' selectors are Go's.
*/}}
{{- define "kthena.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels: call with (dict "root" $ "name" "networking"|"workload"). */}}
{{- define "kthena.selectorLabels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end }}

{{/* Common labels: call with (dict "root" $ "name" "networking"|"workload"). */}}
{{- define "kthena.labels" -}}
helm.sh/chart: {{ include "kthena.chart" .root }}
{{ include "kthena.selectorLabels" . }}
{{- if .root.Chart.AppVersion }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end }}

{{/* Labels of the router's objects (component `kthena-router`). */}}
{{- define "kthena.router.labels" -}}
app.kubernetes.io/component: kthena-router
{{ include "kthena.labels" (dict "root" . "name" "networking") }}
{{- end }}

{{- define "kthena.router.selectorLabels" -}}
app.kubernetes.io/component: kthena-router
{{ include "kthena.selectorLabels" (dict "root" . "name" "networking") }}
{{- end }}

{{/* Labels of the controller-manager's objects (component `kthena-controller-manager`). */}}
{{- define "kthena.controller.labels" -}}
app.kubernetes.io/component: kthena-controller-manager
{{ include "kthena.labels" (dict "root" . "name" "workload") }}
{{- end }}

{{- define "kthena.controller.selectorLabels" -}}
app.kubernetes.io/component: kthena-controller-manager
{{ include "kthena.selectorLabels" (dict "root" . "name" "workload") }}
{{- end }}

{{/*
An image reference: call with (dict "root" $ "image" .Values...image). A repository without
`/` gets the `global.imageRegistry` prefix; the tag defaults to the chart's appVersion.
*/}}
{{- define "kthena.image" -}}
{{- $repo := .image.repository -}}
{{- $registry := .root.Values.global.imageRegistry | default "" -}}
{{- if and $registry (not (contains "/" $repo)) -}}
{{- $repo = printf "%s/%s" (trimSuffix "/" $registry) $repo -}}
{{- end -}}
{{- printf "%s:%s" $repo (toString (.image.tag | default .root.Chart.AppVersion)) -}}
{{- end }}

{{/* Whether the router is installed. */}}
{{- define "kthena.router.enabled" -}}
{{- if and .Values.networking.enabled .Values.networking.kthenaRouter.enabled }}true{{ end }}
{{- end }}

{{/* Whether the router serves HTTPS (Go: cert-manager mode and tls.enabled). */}}
{{- define "kthena.router.tls" -}}
{{- if and (eq .Values.global.certManagementMode "cert-manager") .Values.networking.kthenaRouter.tls.enabled }}true{{ end }}
{{- end }}

{{/*
caBundle of a webhook's clientConfig in `manual` mode (Go's `required` message); nothing in
the other modes (the server or cert-manager writes it).
*/}}
{{- define "kthena.caBundle" -}}
{{- if eq .root.Values.global.certManagementMode "manual" -}}
caBundle: {{ required (printf "A caBundle is required for the %s when certManagementMode is set to 'manual' (global.webhook.caBundle)" .what) .root.Values.global.webhook.caBundle | quote }}
{{- end }}
{{- end }}
