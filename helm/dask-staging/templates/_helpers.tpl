{{/* Names, labels and the pieces every workload shares. */}}

{{- define "dask-staging.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "dask-staging.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels: include with (dict "root" $ "component" "scheduler"). */}}
{{- define "dask-staging.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "dask-staging.image" -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag | quote }}
{{- end -}}

{{- define "dask-staging.schedulerAddress" -}}
{{ printf "tcp://%s-scheduler:%d" (include "dask-staging.fullname" .) (int .Values.scheduler.service.port) }}
{{- end -}}

{{- define "dask-staging.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{- define "dask-staging.minioSecret" -}}
{{ .Values.minio.existingSecret | default (printf "%s-minio" (include "dask-staging.fullname" .)) }}
{{- end -}}

{{- define "dask-staging.postgresSecret" -}}
{{ .Values.postgresql.existingSecret | default (printf "%s-postgresql" (include "dask-staging.fullname" .)) }}
{{- end -}}

{{/* A value kept from the Secret already installed, or a new random one (stable across upgrades). */}}
{{- define "dask-staging.secretValue" -}}
{{- $existing := lookup "v1" "Secret" .root.Release.Namespace .name -}}
{{- if and $existing $existing.data (hasKey $existing.data .key) -}}
{{ index $existing.data .key }}
{{- else -}}
{{ randAlphaNum (int .length) | b64enc }}
{{- end -}}
{{- end -}}

{{/* Environment of every Dask worker: staging settings and S3 / index credentials by reference. */}}
{{- define "dask-staging.workerEnv" -}}
{{- $root := .root -}}
{{- $group := .group -}}
- name: POD_NAME
  valueFrom:
    fieldRef: {fieldPath: metadata.name}
- name: DASK_DISTRIBUTED__WORKER__PRELOAD
  value: '["dask_staging.preload"]'
- name: DASK_STAGING__ROOT
  value: /cache
- name: DASK_STAGING__MAX_BYTES
  value: {{ printf "%d MiB" (div (mul (int $group.cache.sizeGi) 1024 (int $root.Values.staging.fillPercent)) 100) | quote }}
- name: DASK_STAGING__STREAMS
  value: {{ $root.Values.staging.streams | quote }}
- name: DASK_STAGING__PART_SIZE
  value: {{ $root.Values.staging.partSize | quote }}
{{- $endpoint := $root.Values.s3.endpoint -}}
{{- if and (not $endpoint) $root.Values.minio.enabled }}
{{- $endpoint = printf "http://%s-minio:9000" (include "dask-staging.fullname" $root) }}
{{- end }}
{{- with $endpoint }}
- name: AWS_ENDPOINT_URL
  value: {{ . | quote }}
{{- end }}
{{- with $root.Values.s3.region }}
- name: AWS_DEFAULT_REGION
  value: {{ . | quote }}
{{- end }}
{{- if $root.Values.s3.existingSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef: {name: {{ $root.Values.s3.existingSecret | quote }}, key: AWS_ACCESS_KEY_ID}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef: {name: {{ $root.Values.s3.existingSecret | quote }}, key: AWS_SECRET_ACCESS_KEY}
{{- else if $root.Values.minio.enabled }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef: {name: {{ include "dask-staging.minioSecret" $root | quote }}, key: rootUser}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef: {name: {{ include "dask-staging.minioSecret" $root | quote }}, key: rootPassword}
{{- end }}
{{- if $root.Values.staging.sharedIndex }}
- name: STAGING_INDEX_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ include "dask-staging.postgresSecret" $root | quote }}, key: password}
- name: DASK_STAGING__INDEX_URL
  value: {{ printf "postgresql://%s:$(STAGING_INDEX_PASSWORD)@%s-postgresql:5432/%s" $root.Values.postgresql.username (include "dask-staging.fullname" $root) $root.Values.postgresql.database | quote }}
{{- end }}
{{- end -}}
