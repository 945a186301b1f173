{{/*
Object names. They depend on the release name alone (no nameOverride):
a plan's dns pool names the engines' Service as <release>-sortie-engine-nodes,
and the kickoff and the saver find the Job, PVC and pods by these names.
*/}}
{{- define "sortie.fullname" -}}
{{- printf "%s-sortie" .Release.Name -}}
{{- end }}

{{- define "sortie.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sortie.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end }}

{{- define "sortie.reportClaimName" -}}
{{- default (printf "%s-report" (include "sortie.fullname" .)) .Values.report.volume -}}
{{- end }}

{{/*
The plan ConfigMap is named by the first 10 hex digits of the plan's sha256,
so a different plan is a different object and a pod never reads a plan that
changed under it.
*/}}
{{- define "sortie.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "sortie.fullname" .)) .Values.tls.secretName -}}
{{- end }}

{{- define "sortie.planConfigMapName" -}}
{{- printf "%s-plan-%s" (include "sortie.fullname" .) (sha256sum .Values.plan | trunc 10) -}}
{{- end }}

{{/*
Labels. "sortie.selectorLabels" takes (dict "ctx" $ "component" "engine").
*/}}
{{- define "sortie.selectorLabels" -}}
app.kubernetes.io/name: sortie
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "sortie.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
{{ include "sortie.selectorLabels" . }}
app.kubernetes.io/part-of: sortie
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- end }}

{{/*
Pod labels: the user's (mesh switches and the like) under the chart's own,
which win on a clash so that selectors keep matching. Takes
(dict "ctx" $ "component" "engine" "extra" .Values.engine.podLabels).
*/}}
{{- define "sortie.podLabels" -}}
{{- $own := include "sortie.labels" . | fromYaml -}}
{{- toYaml (merge (dict) $own (deepCopy (default (dict) .extra))) -}}
{{- end }}

{{/*
Image reference of images.<name>. Takes (dict "ctx" $ "name" "engine").
By digest unless images.allowTags is true; a tag without it fails the
render, naming the value to change.
*/}}
{{- define "sortie.image" -}}
{{- $img := index .ctx.Values.images .name -}}
{{- $allow := .ctx.Values.images.allowTags -}}
{{- if and $img.tag (not $allow) -}}
{{- fail (printf "images.%s.tag is %q but images.allowTags is false: sortie runs images by digest; set images.%s.digest to sha256:<64 hex> and leave the tag empty (or set images.allowTags=true to run a tag)" .name $img.tag .name) -}}
{{- end -}}
{{- if $img.digest -}}
{{- if not (regexMatch "^sha256:[a-f0-9]{64}$" $img.digest) -}}
{{- fail (printf "images.%s.digest is %q: want sha256: followed by 64 lowercase hex digits" .name $img.digest) -}}
{{- end -}}
{{- if $img.tag -}}
{{- printf "%s:%s@%s" $img.repository $img.tag $img.digest -}}
{{- else -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- end -}}
{{- else if $img.tag -}}
{{- printf "%s:%s" $img.repository $img.tag -}}
{{- else -}}
{{- fail (printf "images.%s.digest is empty: sortie runs images by digest; set it to sha256:<64 hex>" .name) -}}
{{- end -}}
{{- end }}

{{/*
Checks of what the schema cannot say. Included by the engine template,
which every release renders, so a bad value fails any install.
*/}}
{{- define "sortie.validate" -}}
{{- if gt (len .Release.Name) 43 -}}
{{- fail (printf "release name %q is %d characters: at most 43, so that the Service %s-sortie-engine-nodes fits in 63" .Release.Name (len .Release.Name) .Release.Name) -}}
{{- end -}}
{{- $_ := include "sortie.image" (dict "ctx" . "name" "engine") -}}
{{- $_ = include "sortie.image" (dict "ctx" . "name" "driver") -}}
{{- if not .Values.engine.allowTargets -}}
{{- fail "engine.allowTargets is empty: list the hosts (or CIDRs) of the release's targets and its statsd address, e.g. --set 'engine.allowTargets={*.aether-test.mesh}', or {*} to allow any target" -}}
{{- end -}}
{{- if and .Values.job.enabled (not (trim .Values.plan)) -}}
{{- fail "plan is empty but job.enabled is true: pass the plan with --set-file plan=plan.yaml, or set job.enabled=false to install the engines alone" -}}
{{- end -}}
{{- end }}

{{/*
Security contexts: every pod and container runs as the non-root user 65532
with a read-only root filesystem, no privilege escalation, no capabilities
and the runtime's default seccomp profile.
*/}}
{{- define "sortie.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "sortie.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
privileged: false
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end }}
