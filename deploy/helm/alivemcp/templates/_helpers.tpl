{{/* The chart's name, overridable. */}}
{{- define "alivemcp.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the release's objects: the release name, with the chart's name appended
unless the release name has it already. 52 characters, so that "-replicas" (the headless
Service) and a StatefulSet pod's suffix still fit the 63 of a DNS label.
*/}}
{{- define "alivemcp.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "alivemcp.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{- define "alivemcp.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* What selects the release's pods (immutable in a Deployment or StatefulSet). */}}
{{- define "alivemcp.selectorLabels" -}}
app.kubernetes.io/name: {{ include "alivemcp.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Every object's labels. */}}
{{- define "alivemcp.labels" -}}
helm.sh/chart: {{ include "alivemcp.chart" . }}
{{ include "alivemcp.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/component: prober
app.kubernetes.io/part-of: alivemcp
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "alivemcp.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "alivemcp.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "alivemcp.image" -}}
{{- with .Values.image.registry }}{{ . }}/{{ end }}
{{- .Values.image.repository }}
{{- if .Values.image.digest }}@{{ .Values.image.digest }}
{{- else }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
{{- end }}

{{- define "alivemcp.isCluster" -}}
{{- if eq .Values.mode "cluster" }}true{{ end }}
{{- end }}

{{/* The headless Service governing the StatefulSet: each replica's stable DNS name. */}}
{{- define "alivemcp.headlessServiceName" -}}
{{- printf "%s-replicas" (include "alivemcp.fullname" .) }}
{{- end }}

{{/* Where the pod reads its config: the chart's ConfigMap/Secret, or the existing one. */}}
{{- define "alivemcp.configSourceName" -}}
{{- default (printf "%s-config" (include "alivemcp.fullname" .)) .Values.existingConfig.name }}
{{- end }}

{{- define "alivemcp.configSourceKind" -}}
{{- if .Values.existingConfig.name }}{{ .Values.existingConfig.kind }}
{{- else if .Values.configInSecret }}Secret
{{- else }}ConfigMap
{{- end }}
{{- end }}

{{- define "alivemcp.listen" -}}
{{- printf "0.0.0.0:%d" (int .Values.containerPort) }}
{{- end }}

{{/*
The config the chart renders from .Values.config, with what the chart decides set: the listen
address, data_dir on the volume and, in cluster mode, the replica id from the pod name.
*/}}
{{- define "alivemcp.configText" -}}
{{- $config := deepCopy (.Values.config | default dict) }}
{{- $server := get $config "server" | default dict }}
{{- $_ := set $server "listen" (include "alivemcp.listen" .) }}
{{- $_ := set $config "server" $server }}
{{- $_ := set $config "data_dir" "/var/lib/alivemcp" }}
{{- if include "alivemcp.isCluster" . }}
{{- $cluster := get $config "cluster" }}
{{- if not $cluster }}
{{- fail "mode: cluster needs a cluster: section in config (at least cluster.kafka), see docs/cluster.md" }}
{{- end }}
{{- if not (get $cluster "replica_id") }}
{{- $_ := set $cluster "replica_id" "${ALIVEMCP_REPLICA_ID}" }}
{{- end }}
{{- with .Values.cluster.location }}
{{- $own := get $cluster "location" }}
{{- if and $own (ne $own .) }}
{{- fail (printf "cluster.location %q and config.cluster.location %q differ: set one of them" . $own) }}
{{- end }}
{{- $_ := set $cluster "location" . }}
{{- end }}
{{- else if hasKey $config "cluster" }}
{{- fail "config has a cluster: section: set mode: cluster (a standalone Deployment runs one replica)" }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/* The web config the chart renders from .Values.webConfig.config. */}}
{{- define "alivemcp.webConfigText" -}}
{{- $web := deepCopy (.Values.webConfig.config | default dict) }}
{{- if .Values.webConfig.tlsSecret }}
{{- $tls := get $web "tls_server_config" | default dict }}
{{- if not (get $tls "cert_file") }}{{ $_ := set $tls "cert_file" "/etc/alivemcp-tls/tls.crt" }}{{ end }}
{{- if not (get $tls "key_file") }}{{ $_ := set $tls "key_file" "/etc/alivemcp-tls/tls.key" }}{{ end }}
{{- $_ := set $web "tls_server_config" $tls }}
{{- end }}
{{- toYaml $web }}
{{- end }}

{{- define "alivemcp.webConfigSecretName" -}}
{{- default (printf "%s-web-config" (include "alivemcp.fullname" .)) .Values.webConfig.existingSecret }}
{{- end }}

{{/*
"true" when the daemon serves https: webConfig.scheme, else what the web config the chart
renders says (TLS is on when tls_server_config sets any of these, as in exporter-toolkit).
*/}}
{{- define "alivemcp.tls" -}}
{{- $web := .Values.webConfig }}
{{- if and $web.enabled (eq $web.scheme "https") }}true
{{- else if and $web.enabled (eq $web.scheme "") (not $web.existingSecret) }}
{{- $tls := get (include "alivemcp.webConfigText" . | fromYaml) "tls_server_config" | default dict }}
{{- $on := false }}
{{- range list "cert" "cert_file" "key" "key_file" "client_ca" "client_ca_file" "client_auth_type" }}
{{- if hasKey $tls . }}{{ $on = true }}{{ end }}
{{- end }}
{{- if $on }}true{{ end }}
{{- end }}
{{- end }}

{{- define "alivemcp.scheme" -}}
{{- if include "alivemcp.tls" . }}https{{ else }}http{{ end }}
{{- end }}

{{/* An httpGet probe on the HTTP port: path, then the timings from values. */}}
{{- define "alivemcp.probe" -}}
{{- $root := index . 0 -}}
httpGet:
  path: {{ index . 1 }}
  port: http
  scheme: {{ include "alivemcp.scheme" $root | upper }}
{{- with index . 2 }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The pod template's spec, shared by the Deployment (standalone) and the StatefulSet (cluster
mode).
*/}}
{{- define "alivemcp.podSpec" -}}
{{- $cluster := include "alivemcp.isCluster" . -}}
serviceAccountName: {{ include "alivemcp.serviceAccountName" . }}
# The prober never talks to the Kubernetes API (EKS projects the IRSA token regardless).
automountServiceAccountToken: false
enableServiceLinks: false
terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds | default (ternary 45 30 (eq $cluster "true")) }}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .Values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml .Values.topologySpreadConstraints | nindent 2 }}
{{- else if $cluster }}
# One replica per node (and per zone where there are enough): losing a node costs one
# replica's shards for a session timeout, not the whole prober.
topologySpreadConstraints:
  {{- range list "kubernetes.io/hostname" "topology.kubernetes.io/zone" }}
  - maxSkew: 1
    topologyKey: {{ . }}
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "alivemcp.selectorLabels" $ | nindent 8 }}
  {{- end }}
{{- end }}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
  - name: alivemcp
    image: {{ include "alivemcp.image" . | quote }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    args:
      - --config
      - /etc/alivemcp/config.yaml
      - --listen
      - {{ include "alivemcp.listen" . | quote }}
      {{- if .Values.webConfig.enabled }}
      - --web.config.file
      - /etc/alivemcp-web/{{ .Values.webConfig.key }}
      {{- end }}
      {{- with .Values.extraArgs }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    ports:
      - name: http
        containerPort: {{ .Values.containerPort }}
        protocol: TCP
    {{- if or $cluster .Values.extraEnv }}
    env:
      {{- if $cluster }}
      # The replica id (cluster.replica_id): the pod name, stable across restarts, so a
      # restarted replica gets its shards back without a rebalance (static membership).
      - name: ALIVEMCP_REPLICA_ID
        valueFrom:
          fieldRef:
            fieldPath: metadata.name
      {{- with .Values.cluster.location }}
      # Where the replicas probe from (cluster.location): in the rendered config already; an
      # existingConfig can say `location: ${ALIVEMCP_LOCATION}`.
      - name: ALIVEMCP_LOCATION
        value: {{ . | quote }}
      {{- end }}
      {{- end }}
      {{- with .Values.extraEnv }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- end }}
    {{- with .Values.extraEnvFrom }}
    envFrom:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with .Values.securityContext }}
    securityContext:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with .Values.resources }}
    resources:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    startupProbe:
      {{- include "alivemcp.probe" (list . "/healthz" .Values.startupProbe) | nindent 6 }}
    livenessProbe:
      {{- include "alivemcp.probe" (list . "/healthz" .Values.livenessProbe) | nindent 6 }}
    readinessProbe:
      {{- include "alivemcp.probe" (list . "/readyz" .Values.readinessProbe) | nindent 6 }}
    volumeMounts:
      # Directory mounts (no subPath): edits of the ConfigMap and Secrets reach the pod.
      - name: config
        mountPath: /etc/alivemcp
        readOnly: true
      - name: data
        mountPath: /var/lib/alivemcp
      # The root filesystem is read-only; libraries that want a scratch file get /tmp.
      - name: tmp
        mountPath: /tmp
      {{- if .Values.webConfig.enabled }}
      - name: web-config
        mountPath: /etc/alivemcp-web
        readOnly: true
      {{- end }}
      {{- if and .Values.webConfig.enabled .Values.webConfig.tlsSecret }}
      - name: tls
        mountPath: /etc/alivemcp-tls
        readOnly: true
      {{- end }}
      {{- with .Values.extraVolumeMounts }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
volumes:
  - name: config
    {{- $key := .Values.existingConfig.key }}
    {{- if eq (include "alivemcp.configSourceKind" .) "Secret" }}
    secret:
      secretName: {{ include "alivemcp.configSourceName" . }}
    {{- else }}
    configMap:
      name: {{ include "alivemcp.configSourceName" . }}
    {{- end }}
      {{- if and .Values.existingConfig.name (ne $key "config.yaml") }}
      items:
        - key: {{ $key }}
          path: config.yaml
      {{- end }}
  {{- if not $cluster }}
  - name: data
    {{- if not .Values.persistence.enabled }}
    emptyDir: {}
    {{- else }}
    persistentVolumeClaim:
      claimName: {{ .Values.persistence.existingClaim | default (printf "%s-data" (include "alivemcp.fullname" .)) }}
    {{- end }}
  {{- else if not .Values.persistence.enabled }}
  - name: data
    emptyDir: {}
  {{- end }}
  - name: tmp
    emptyDir:
      sizeLimit: 64Mi
  {{- if .Values.webConfig.enabled }}
  - name: web-config
    secret:
      secretName: {{ include "alivemcp.webConfigSecretName" . }}
  {{- end }}
  {{- if and .Values.webConfig.enabled .Values.webConfig.tlsSecret }}
  - name: tls
    secret:
      secretName: {{ .Values.webConfig.tlsSecret }}
  {{- end }}
  {{- with .Values.extraVolumes }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/* The pod template's annotations: the config checksum (a changed config rolls the pods). */}}
{{- define "alivemcp.podAnnotations" -}}
{{- if and .Values.rollOnConfigChange (not .Values.existingConfig.name) -}}
checksum/config: {{ include "alivemcp.configText" . | sha256sum }}
{{- end }}
{{- with .Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* A data volume claim's spec (standalone's PVC, cluster mode's volumeClaimTemplates). */}}
{{- define "alivemcp.claimSpec" -}}
accessModes:
  {{- toYaml .Values.persistence.accessModes | nindent 2 }}
{{- with .Values.persistence.storageClassName }}
storageClassName: {{ . }}
{{- end }}
resources:
  requests:
    storage: {{ .Values.persistence.size }}
{{- end }}
