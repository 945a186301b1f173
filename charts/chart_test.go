package chart

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func TestLoad(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.Metadata.Name != ChartName || c.Metadata.APIVersion != "v2" {
		t.Errorf("chart %s apiVersion %s, want %s v2", c.Metadata.Name, c.Metadata.APIVersion, ChartName)
	}
	if len(c.Schema) == 0 {
		t.Error("chart has no values.schema.json")
	}
	if err := c.Validate(); err != nil {
		t.Errorf("chart metadata: %v", err)
	}
	var tpls []string
	for _, f := range c.Templates {
		tpls = append(tpls, f.Name)
	}
	for _, want := range []string{"templates/engine.yaml", "templates/driver-job.yaml", "templates/_helpers.tpl"} {
		if !slices.Contains(tpls, want) {
			t.Errorf("templates %q lack %s", tpls, want)
		}
	}
}

func TestNamesFor(t *testing.T) {
	got := NamesFor("soak")
	want := Names{
		EngineWorkload: "soak-sortie-engine",
		EngineService:  "soak-sortie-engine-nodes",
		NetworkPolicy:  "soak-sortie-engine",
		Job:            "soak-sortie-driver",
		ReportClaim:    "soak-sortie-report",
		TLSSecret:      "soak-sortie-tls",
		ServiceAccount: "soak-sortie",
		EngineSelector: "app.kubernetes.io/component=engine,app.kubernetes.io/instance=soak,app.kubernetes.io/name=sortie",
		DriverSelector: "app.kubernetes.io/component=driver,app.kubernetes.io/instance=soak,app.kubernetes.io/name=sortie",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NamesFor (-want +got):\n%s", diff)
	}
	// sha256("") = e3b0c44298fc1c149afbf4c8996fb924...
	if got := PlanConfigMapName("r", ""); got != "r-sortie-plan-e3b0c44298" {
		t.Errorf("PlanConfigMapName(r, \"\") = %q", got)
	}
}

// TestRenderValueSets renders the chart over the value sets a team uses and
// checks every object of each against the invariants and the set's point.
func TestRenderValueSets(t *testing.T) {
	plan := readPlan(t)
	full := []string{"ConfigMap", "DaemonSet", "Job", "NetworkPolicy", "PersistentVolumeClaim", "Service", "ServiceAccount"}
	enginesOnly := []string{"DaemonSet", "NetworkPolicy", "Service", "ServiceAccount"}
	tests := []struct {
		name   string
		values map[string]any
		kinds  []string
		check  func(t *testing.T, r *rendered)
	}{
		{
			name:   "defaults with a plan",
			values: vals("plan", plan),
			kinds:  full,
			check: func(t *testing.T, r *rendered) {
				e := container(t, r.enginePod(), EngineContainer)
				if got, _ := argAfter(e.Args, "--max-concurrent-executions"); got != "16" {
					t.Errorf("--max-concurrent-executions %q, want 16", got)
				}
				if got, _ := argAfter(e.Args, "--backend-name"); got != "$("+BackendNameEnv+")" {
					t.Errorf("--backend-name %q, want $(%s) (node by default)", got, BackendNameEnv)
				}
				d := container(t, &r.job.Spec.Template, DriverContainer)
				want := []string{"run", "/plan/plan.yaml", "-o", "/report/report.json", "--results-stream", "/report/results.jsonl", "--live-record", "/report/live.jsonl",
					"--client-cert", "/tls/driver.crt", "--client-key", "/tls/driver.key", "--engine-ca", "/tls/ca.crt"}
				if diff := cmp.Diff(want, d.Args); diff != "" {
					t.Errorf("driver args (-want +got):\n%s", diff)
				}
				if got := string(r.configMap.BinaryData["plan.yaml"]); got != plan {
					t.Errorf("ConfigMap plan differs from the plan value:\n%s", cmp.Diff(plan, got))
				}
				if r.claim.Annotations["helm.sh/resource-policy"] != "keep" {
					t.Errorf("report PVC annotations %v, want helm.sh/resource-policy: keep", r.claim.Annotations)
				}
				if r.claim.Spec.StorageClassName != nil {
					t.Errorf("report PVC storage class %q, want the cluster default (unset)", *r.claim.Spec.StorageClassName)
				}
				if q := r.claim.Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != "1Gi" {
					t.Errorf("report PVC size %s, want 1Gi", q.String())
				}
				// Images run as repository@digest of the chart's defaults,
				// whatever digests the lock file pinned there.
				c, err := Load()
				if err != nil {
					t.Fatal(err)
				}
				images := c.Values["images"].(map[string]any)
				for name, got := range map[string]string{
					"engine": e.Image,
					"driver": container(t, &r.job.Spec.Template, DriverContainer).Image,
				} {
					im := images[name].(map[string]any)
					if want := im["repository"].(string) + "@" + im["digest"].(string); got != want {
						t.Errorf("%s image %q, want %q", name, got, want)
					}
				}
				if p := r.enginePod().Spec.PriorityClassName; p != "" {
					t.Errorf("engine priorityClassName %q by default", p)
				}
			},
		},
		{
			name:   "engines alone",
			values: vals("job.enabled", false),
			kinds:  enginesOnly,
		},
		{
			name:   "engines alone ignore a plan",
			values: vals("job.enabled", false, "plan", plan),
			kinds:  enginesOnly,
		},
		{
			name:   "Deployment",
			values: vals("plan", plan, "engine.kind", "Deployment", "engine.replicas", 3),
			kinds:  []string{"ConfigMap", "Deployment", "Job", "NetworkPolicy", "PersistentVolumeClaim", "Service", "ServiceAccount"},
			check: func(t *testing.T, r *rendered) {
				if r.deployment.Spec.Replicas == nil || *r.deployment.Spec.Replicas != 3 {
					t.Errorf("replicas %v, want 3", r.deployment.Spec.Replicas)
				}
			},
		},
		{
			name:   "backend name from the node",
			values: vals("job.enabled", false, "engine.backendNameFrom", "node"),
			kinds:  enginesOnly,
			check:  checkBackendName("spec.nodeName"),
		},
		{
			name:   "backend name from the pod",
			values: vals("job.enabled", false, "engine.backendNameFrom", "pod"),
			kinds:  enginesOnly,
			check:  checkBackendName("metadata.name"),
		},
		{
			name:   "no backend name",
			values: vals("job.enabled", false, "engine.backendNameFrom", "none"),
			kinds:  enginesOnly,
			check:  checkBackendName(""),
		},
		{
			name: "mesh labels, annotations and priority classes",
			values: vals("plan", plan,
				"engine.podLabels", map[string]any{"sidecar.istio.io/inject": "true", "app.kubernetes.io/component": "hijack"},
				"engine.podAnnotations", map[string]any{"proxy.istio.io/config": "holdApplicationUntilProxyStarts: true"},
				"engine.priorityClassName", "sortie-engine",
				"job.podLabels", map[string]any{"sidecar.istio.io/inject": "false"},
				"job.podAnnotations", map[string]any{"linkerd.io/inject": "disabled"},
				"job.priorityClassName", "sortie-driver"),
			kinds: full,
			check: func(t *testing.T, r *rendered) {
				e, d := r.enginePod(), &r.job.Spec.Template
				if e.Labels["sidecar.istio.io/inject"] != "true" || d.Labels["sidecar.istio.io/inject"] != "false" {
					t.Errorf("mesh labels: engine %v, driver %v", e.Labels, d.Labels)
				}
				// The chart's own label wins, so the selectors keep matching
				// (checkInvariants holds them).
				if e.Labels["app.kubernetes.io/component"] != "engine" {
					t.Errorf("engine component label %q: a pod label overrode the chart's", e.Labels["app.kubernetes.io/component"])
				}
				if e.Annotations["proxy.istio.io/config"] == "" || d.Annotations["linkerd.io/inject"] != "disabled" {
					t.Errorf("mesh annotations: engine %v, driver %v", e.Annotations, d.Annotations)
				}
				if e.Spec.PriorityClassName != "sortie-engine" || d.Spec.PriorityClassName != "sortie-driver" {
					t.Errorf("priorityClassName: engine %q, driver %q", e.Spec.PriorityClassName, d.Spec.PriorityClassName)
				}
				if _, ok := r.job.Labels["sidecar.istio.io/inject"]; ok {
					t.Error("pod labels leaked onto the Job object")
				}
			},
		},
		{
			name:   "existing report claim",
			values: vals("plan", plan, "report.volume", "soak-report", "report.path", "out.json", "report.stream", "", "report.live", ""),
			kinds:  []string{"ConfigMap", "DaemonSet", "Job", "NetworkPolicy", "Service", "ServiceAccount"},
			check: func(t *testing.T, r *rendered) {
				pod := &r.job.Spec.Template
				for _, v := range pod.Spec.Volumes {
					if v.Name == "report" && v.PersistentVolumeClaim.ClaimName != "soak-report" {
						t.Errorf("report claim %q, want soak-report", v.PersistentVolumeClaim.ClaimName)
					}
				}
				d := container(t, pod, DriverContainer)
				if got, _ := argAfter(d.Args, "-o"); got != "/report/out.json" {
					t.Errorf("-o %q, want /report/out.json", got)
				}
				if hasArg(d.Args, "--results-stream") {
					t.Errorf("driver args %q: --results-stream with report.stream empty", d.Args)
				}
				// Off, not the driver's default next to a stream.
				if got, _ := argAfter(d.Args, "--live-record"); got != "off" {
					t.Errorf("--live-record %q with report.live empty, want off", got)
				}
			},
		},
		{
			name: "created claim with a storage class, not kept",
			values: vals("plan", plan, "report.storageClass", "standard", "report.size", "5Gi",
				"report.keep", false, "report.accessModes", []any{"ReadWriteOncePod"}),
			kinds: full,
			check: func(t *testing.T, r *rendered) {
				c := r.claim
				if c.Spec.StorageClassName == nil || *c.Spec.StorageClassName != "standard" {
					t.Errorf("storage class %v, want standard", c.Spec.StorageClassName)
				}
				if q := c.Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != "5Gi" {
					t.Errorf("size %s, want 5Gi", q.String())
				}
				if _, ok := c.Annotations["helm.sh/resource-policy"]; ok {
					t.Error("claim kept with report.keep false")
				}
				if !slices.Equal(c.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}) {
					t.Errorf("access modes %v", c.Spec.AccessModes)
				}
			},
		},
		{
			name: "resources, scheduling and extra arguments",
			values: vals("plan", plan,
				"engine.maxConcurrentExecutions", 4,
				"engine.resources", map[string]any{"requests": map[string]any{"cpu": "1", "memory": "256Mi"}, "limits": map[string]any{"memory": "1Gi"}},
				"engine.tolerations", []any{map[string]any{"operator": "Exists"}},
				"engine.nodeSelector", map[string]any{"kubernetes.io/os": "linux"},
				"engine.extraArgs", []any{"--shutdown-timeout", "20s"},
				"job.resources", map[string]any{"limits": map[string]any{"cpu": 2}},
				"job.extraArgs", []any{"--progress", "1m"},
				"images.pullSecrets", []any{"regcred"}),
			kinds: full,
			check: func(t *testing.T, r *rendered) {
				e := container(t, r.enginePod(), EngineContainer)
				if got, _ := argAfter(e.Args, "--max-concurrent-executions"); got != "4" {
					t.Errorf("--max-concurrent-executions %q, want 4", got)
				}
				if got, _ := argAfter(e.Args, "--shutdown-timeout"); got != "20s" {
					t.Errorf("engine extra args lost: %q", e.Args)
				}
				if q := e.Resources.Limits[corev1.ResourceMemory]; q.String() != "1Gi" {
					t.Errorf("engine memory limit %s", q.String())
				}
				if q := e.Resources.Requests[corev1.ResourceCPU]; q.String() != "1" {
					t.Errorf("engine cpu request %s", q.String())
				}
				es := r.enginePod().Spec
				if len(es.Tolerations) != 1 || es.NodeSelector["kubernetes.io/os"] != "linux" {
					t.Errorf("engine scheduling: tolerations %v, nodeSelector %v", es.Tolerations, es.NodeSelector)
				}
				if len(es.ImagePullSecrets) != 1 || es.ImagePullSecrets[0].Name != "regcred" {
					t.Errorf("pull secrets %v", es.ImagePullSecrets)
				}
				d := container(t, &r.job.Spec.Template, DriverContainer)
				if got, _ := argAfter(d.Args, "--progress"); got != "1m" {
					t.Errorf("driver extra args lost: %q", d.Args)
				}
				if q := d.Resources.Limits[corev1.ResourceCPU]; q.String() != "2" {
					t.Errorf("driver cpu limit %s", q.String())
				}
			},
		},
		{
			name:   "no NetworkPolicy, an existing ServiceAccount",
			values: vals("plan", plan, "networkPolicy.enabled", false, "serviceAccount.create", false, "serviceAccount.name", "soak-runner"),
			kinds:  []string{"ConfigMap", "DaemonSet", "Job", "PersistentVolumeClaim", "Service"},
			check: func(t *testing.T, r *rendered) {
				if got := r.enginePod().Spec.ServiceAccountName; got != "soak-runner" {
					t.Errorf("engine ServiceAccount %q", got)
				}
				if got := r.job.Spec.Template.Spec.ServiceAccountName; got != "soak-runner" {
					t.Errorf("driver ServiceAccount %q", got)
				}
			},
		},
		{
			name:   "plaintext control plane",
			values: vals("plan", plan, "tls.enabled", false, "engine.allowTargets", []any{"10.0.0.0/8", "*.aether-test.mesh"}),
			kinds:  full,
		},
		{
			name:   "own TLS Secret, engines alone",
			values: vals("job.enabled", false, "tls.secretName", "run-ca", "engine.allowTargets", []any{"*"}),
			kinds:  enginesOnly,
		},
		{
			name: "tags when allowed",
			values: vals("plan", plan, "images.allowTags", true,
				"images.engine.tag", "dev", "images.engine.digest", "",
				"images.driver.tag", "v0.1.0"),
			kinds: full,
			check: func(t *testing.T, r *rendered) {
				if got := container(t, r.enginePod(), EngineContainer).Image; got != "ghcr.io/sortie-soak/sortie-engine:dev" {
					t.Errorf("engine image %q", got)
				}
				// A tag and a digest: the digest decides what runs.
				if got := container(t, &r.job.Spec.Template, DriverContainer).Image; !strings.HasPrefix(got, "ghcr.io/sortie-soak/sortie:v0.1.0@sha256:") {
					t.Errorf("driver image %q", got)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := renderDecode(t, tt.values)
			got := slices.Clone(r.kinds)
			slices.Sort(got)
			if diff := cmp.Diff(tt.kinds, got); diff != "" {
				t.Errorf("kinds (-want +got):\n%s", diff)
			}
			checkInvariants(t, r, tt.values)
			if tt.check != nil && !t.Failed() {
				tt.check(t, r)
			}
		})
	}
}

func checkBackendName(fieldPath string) func(*testing.T, *rendered) {
	return func(t *testing.T, r *rendered) {
		e := container(t, r.enginePod(), EngineContainer)
		name, ok := argAfter(e.Args, "--backend-name")
		if fieldPath == "" {
			if ok || len(e.Env) != 0 {
				t.Errorf("backendNameFrom none: args %q, env %v", e.Args, e.Env)
			}
			return
		}
		if name != "$("+BackendNameEnv+")" {
			t.Errorf("--backend-name %q, want $(%s)", name, BackendNameEnv)
		}
		if len(e.Env) != 1 || e.Env[0].Name != BackendNameEnv || e.Env[0].ValueFrom == nil ||
			e.Env[0].ValueFrom.FieldRef == nil || e.Env[0].ValueFrom.FieldRef.FieldPath != fieldPath {
			t.Errorf("env %+v, want %s from %s", e.Env, BackendNameEnv, fieldPath)
		}
	}
}

// TestRenderRefused: every bad value is refused before anything is
// rendered, with a message that names it.
func TestRenderRefused(t *testing.T) {
	plan := readPlan(t)
	tests := []struct {
		name    string
		release string
		values  map[string]any
		want    []string // substrings of the error
	}{
		{"engine tag without allowTags", "", vals("plan", plan, "images.engine.tag", "latest"),
			[]string{`images.engine.tag is "latest" but images.allowTags is false`, "images.engine.digest"}},
		{"driver tag without allowTags", "", vals("plan", plan, "images.driver.tag", "v1"),
			[]string{`images.driver.tag is "v1" but images.allowTags is false`}},
		{"driver tag refused with engines alone too", "", vals("job.enabled", false, "images.driver.tag", "v1"),
			[]string{"images.driver.tag", "allowTags is false"}},
		{"no digest and no tag", "", vals("plan", plan, "images.engine.digest", ""),
			[]string{"images.engine.digest is empty"}},
		{"tags allowed but neither given", "", vals("plan", plan, "images.allowTags", true, "images.driver.digest", ""),
			[]string{"images.driver.digest is empty"}},
		{"short digest", "", vals("plan", plan, "images.engine.digest", "sha256:abc"),
			[]string{"/images/engine/digest", "sha256:abc"}},
		{"uppercase digest", "", vals("plan", plan, "images.driver.digest", "sha256:"+strings.Repeat("A", 64)),
			[]string{"/images/driver/digest"}},
		{"sha512 digest", "", vals("plan", plan, "images.driver.digest", "sha512:"+strings.Repeat("a", 64)),
			[]string{"/images/driver/digest"}},
		{"no plan", "", vals(),
			[]string{"plan is empty but job.enabled is true", "--set-file plan="}},
		{"blank plan", "", vals("plan", " \n\t"),
			[]string{"plan is empty but job.enabled is true"}},
		{"unknown engine kind", "", vals("plan", plan, "engine.kind", "StatefulSet"),
			[]string{"/engine/kind", "DaemonSet", "Deployment"}},
		{"unknown backendNameFrom", "", vals("plan", plan, "engine.backendNameFrom", "host"),
			[]string{"/engine/backendNameFrom", "none", "node", "pod"}},
		{"maxConcurrentExecutions as a string", "", vals("plan", plan, "engine.maxConcurrentExecutions", "16"),
			[]string{"/engine/maxConcurrentExecutions", "integer"}},
		{"maxConcurrentExecutions zero", "", vals("plan", plan, "engine.maxConcurrentExecutions", 0),
			[]string{"/engine/maxConcurrentExecutions"}},
		{"replicas zero", "", vals("plan", plan, "engine.kind", "Deployment", "engine.replicas", 0),
			[]string{"/engine/replicas"}},
		{"misspelled key", "", vals("plan", plan, "engine.maxConcurentExecutions", 8),
			[]string{"maxConcurentExecutions"}},
		{"unknown top-level key", "", vals("plan", plan, "engines", map[string]any{}),
			[]string{"engines"}},
		{"job.enabled as a string", "", vals("plan", plan, "job.enabled", "false"),
			[]string{"/job/enabled", "boolean"}},
		{"plan as a map", "", vals("plan", map[string]any{"version": "v1"}),
			[]string{"/plan", "string"}},
		{"report path in a directory", "", vals("plan", plan, "report.path", "../etc/report.json"),
			[]string{"/report/path"}},
		{"report stream absolute", "", vals("plan", plan, "report.stream", "/tmp/results.jsonl"),
			[]string{"/report/stream"}},
		{"report volume not a name", "", vals("plan", plan, "report.volume", "My_Claim"),
			[]string{"/report/volume"}},
		{"report size not a quantity", "", vals("plan", plan, "report.size", "lots"),
			[]string{"/report/size"}},
		{"access mode unknown", "", vals("plan", plan, "report.accessModes", []any{"ReadWriteSometimes"}),
			[]string{"/report/accessModes"}},
		{"label value not a string", "", vals("plan", plan, "engine.podLabels", map[string]any{"inject": true}),
			[]string{"/engine/podLabels/inject", "string"}},
		{"priority class not a name", "", vals("plan", plan, "job.priorityClassName", "High Priority"),
			[]string{"/job/priorityClassName"}},
		{"pull policy unknown", "", vals("plan", plan, "images.engine.pullPolicy", "Sometimes"),
			[]string{"/images/engine/pullPolicy"}},
		{"resources with an unknown field", "", vals("plan", plan, "engine.resources", map[string]any{"request": map[string]any{"cpu": "1"}}),
			[]string{"/engine/resources", "request"}},
		{"release name too long", strings.Repeat("r", 44), vals("plan", plan),
			[]string{"is 44 characters: at most 43"}},
		{"no allowlist", "", vals("plan", plan, "engine.allowTargets", []any{}),
			[]string{"engine.allowTargets is empty"}},
		{"no allowlist with engines alone", "", vals("job.enabled", false, "engine.allowTargets", []any{}),
			[]string{"engine.allowTargets is empty"}},
		{"allowlist entries in one string", "", vals("plan", plan, "engine.allowTargets", []any{"a.mesh,b.mesh"}),
			[]string{"/engine/allowTargets/0"}},
		{"allowlist as a string", "", vals("plan", plan, "engine.allowTargets", "*"),
			[]string{"/engine/allowTargets"}},
		{"tls.enabled as a string", "", vals("plan", plan, "tls.enabled", "true"),
			[]string{"/tls/enabled", "boolean"}},
		{"tls secret not a name", "", vals("plan", plan, "tls.secretName", "My Secret"),
			[]string{"/tls/secretName"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			release := tt.release
			if release == "" {
				release = testRelease
			}
			m, err := Render(tt.values, release, testNamespace)
			if err == nil {
				t.Fatalf("rendered %d manifests, want a refusal", len(m))
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestPlanConfigMapNamedByDigest: a new plan is a new ConfigMap, and the
// Job follows it; the same plan keeps its name.
func TestPlanConfigMapNamedByDigest(t *testing.T) {
	plan := readPlan(t)
	other := strings.Replace(plan, "rate: 60", "rate: 61", 1)
	if other == plan {
		t.Fatal("test plan has no rate: 60 to change")
	}
	a := renderDecode(t, vals("plan", plan))
	b := renderDecode(t, vals("plan", other))
	again := renderDecode(t, vals("plan", plan))
	if a.configMap.Name == b.configMap.Name {
		t.Errorf("two plans, one ConfigMap name %q", a.configMap.Name)
	}
	if a.configMap.Name != again.configMap.Name {
		t.Errorf("one plan, two names %q and %q", a.configMap.Name, again.configMap.Name)
	}
	for _, r := range []*rendered{a, b} {
		for _, v := range r.job.Spec.Template.Spec.Volumes {
			if v.Name == "plan" && v.ConfigMap.Name != r.configMap.Name {
				t.Errorf("Job mounts %q, the ConfigMap is %q", v.ConfigMap.Name, r.configMap.Name)
			}
		}
	}
	if want := PlanConfigMapName(testRelease, other); b.configMap.Name != want {
		t.Errorf("ConfigMap %q, PlanConfigMapName says %q", b.configMap.Name, want)
	}
}

// TestEnginesUnchangedWhenJobAdded: the kickoff installs the engines alone,
// then upgrades the release with the plan; the upgrade must leave the
// engine objects as they were, or it would roll every engine.
func TestEnginesUnchangedWhenJobAdded(t *testing.T) {
	plan := readPlan(t)
	for _, kind := range []string{"DaemonSet", "Deployment"} {
		t.Run(kind, func(t *testing.T) {
			alone, err := Render(vals("job.enabled", false, "engine.kind", kind), testRelease, testNamespace)
			if err != nil {
				t.Fatal(err)
			}
			with, err := Render(vals("plan", plan, "engine.kind", kind), testRelease, testNamespace)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range Paths(alone) {
				if diff := cmp.Diff(alone[p], with[p]); diff != "" {
					t.Errorf("%s changes when the Job is added (-alone +with):\n%s", p, diff)
				}
			}
		})
	}
}

func TestSplitManifest(t *testing.T) {
	got, err := splitManifest("---\n# Source: c/templates/a.yaml\nkind: A\n---\n# Source: c/templates/b.yaml\n---\n# Source: c/templates/a.yaml\nkind: A2\n")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"c/templates/a.yaml": "kind: A\n---\nkind: A2\n"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("splitManifest (-want +got):\n%s", diff)
	}
	if _, err := splitManifest("kind: A\n"); err == nil {
		t.Error("a manifest without Source lines was split")
	}
}
