//go:build lab

// The tests of record of the cluster path, on the lab's real cluster.
//
// They sit behind the build tag lab rather than behind a skip: they need
// root and a running lab (a cold build of its binaries takes 15 to 30
// minutes), so the default `go test ./...` cannot run them, and a skip
// there would read as a pass. With the tag, `go test ./...` does not even
// build them, and whoever asks for them with -tags lab asked for the lab:
// a lab that is not there is a failure that says how to start it. .ci/lab
// starts the lab, runs them with -tags lab and stops the lab.
package lab_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sortie-soak/sortie/e2e/soak"
	"github.com/sortie-soak/sortie/e2e/soak/lab"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/kube"
	"github.com/sortie-soak/sortie/record"
)

// labEnv is the variable that points the tests at the lab's kubeconfig.
const labEnv = "SORTIE_LAB_KUBECONFIG"

// theLab returns the manifest of the running lab, or fails the test with
// how to start one.
func theLab(t *testing.T) lab.Manifest {
	t.Helper()
	kc := os.Getenv(labEnv)
	if kc == "" {
		t.Fatalf("%s is not set: these tests need the lab. As root: go run ./e2e/soak/cmd/soak lab up, then %s=/var/lib/sortie-lab/kubeconfig go test -tags lab ./e2e/soak/lab/ (or run .ci/lab, which does both and stops the lab after)", labEnv, labEnv)
	}
	m, err := lab.ReadManifest(filepath.Dir(kc))
	if err != nil {
		t.Fatalf("%s=%s: no running lab there (%v); start it with soak lab up", labEnv, kc, err)
	}
	if m.Values == "" {
		t.Fatalf("the lab at %s was started with --images=false: the chart has no images to pull", filepath.Dir(kc))
	}
	return m
}

// runArgs are the flags of `soak run e2e` against the lab.
func runArgs(m lab.Manifest) []string {
	return []string{"run", "e2e", "--kubeconfig", m.Kubeconfig, "--context", m.Context, "--namespace", m.Namespace,
		"--targets", m.Targets, "--values", m.Values, "--statsd", "off"}
}

// soakRun runs the soak command in this process, its output kept in
// logFile and copied to watch (when not nil) as well, and returns its
// stdout.
func soakRun(t *testing.T, ctx context.Context, logFile string, watch io.Writer, args ...string) (string, error) {
	t.Helper()
	// (No t.Fatal here: the lost-engine test calls this from a goroutine.)
	f, err := os.Create(logFile)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var out, errb bytes.Buffer
	stdout := []io.Writer{&out, f}
	if watch != nil {
		stdout = append(stdout, watch)
	}
	// The kickoff writes from its saver, watchdog and churn goroutines.
	var mu sync.Mutex
	o := &lockedWriter{mu: &mu, w: io.MultiWriter(stdout...)}
	e := &lockedWriter{mu: &mu, w: io.MultiWriter(&errb, f)}
	t0 := time.Now()
	runErr := soak.Run(ctx, args, o, e)
	t.Logf("soak %s: %v after %s", strings.Join(args[:2], " "), runErr, time.Since(t0).Round(time.Second))
	if runErr != nil {
		t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	}
	return out.String(), runErr
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// lineSignal closes hit at the first line written to it that matches re.
type lineSignal struct {
	re   *regexp.Regexp
	hit  chan struct{}
	buf  []byte
	done bool
}

func (s *lineSignal) Write(p []byte) (int, error) {
	s.buf = append(s.buf, p...)
	for !s.done {
		i := bytes.IndexByte(s.buf, '\n')
		if i < 0 {
			break
		}
		if s.re.Match(s.buf[:i]) {
			s.done = true
			close(s.hit)
		}
		s.buf = s.buf[i+1:]
	}
	return len(p), nil
}

// verdictLines are the lines a test logs as its verdict.
var verdictLines = regexp.MustCompile(`(?m)^(SOAK |VERDICT |SORTIE_SAVED |SORTIE_OVERDUE |SUMMARY |RESTART |ROLLED |ROLL  |STEP preflight |PREFLIGHT FAIL|ABORT |LOST  ).*$`)

func logVerdicts(t *testing.T, out string) {
	t.Helper()
	for _, l := range verdictLines.FindAllString(out, -1) {
		t.Log(l)
	}
}

// TestIntegrationLabE2E is the e2e profile on the real cluster: the
// pre-flight passes and changes nothing, then a 60 s run passes with every
// planned request answered 2xx on every node, the saver's SAVED and the
// watchdog's PASS.
func TestIntegrationLabE2E(t *testing.T) {
	m := theLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()

	t.Run("preflight", func(t *testing.T) {
		out, err := soakRun(t, ctx, filepath.Join(dir, "preflight.txt"), nil, append(runArgs(m), "--preflight")...)
		logVerdicts(t, out)
		if err != nil {
			t.Fatalf("preflight: %v", err)
		}
		if !regexp.MustCompile(`(?m)^STEP preflight ok$`).MatchString(out) || strings.Contains(out, "PREFLIGHT FAIL") {
			t.Fatalf("preflight did not pass:\n%s", out)
		}
	})
	if t.Failed() {
		return
	}

	run := filepath.Join(dir, "run")
	t.Cleanup(func() { teardown(t, run) })
	t.Run("e2e 60s", func(t *testing.T) {
		args := append(runArgs(m), "--duration", "60s", "--settle", "5s", "--watch-interval", "20s", "--dir", run)
		out, err := soakRun(t, ctx, filepath.Join(dir, "e2e.txt"), nil, args...)
		logVerdicts(t, out)
		if err != nil {
			t.Fatalf("soak run e2e: %v", err)
		}
		checkE2E(t, out, run, m.Nodes)
	})
}

// TestIntegrationLabLostEngine loses a real engine abruptly: 20 s into a
// 60 s run the engine pod of the last node is deleted at once (no grace).
// Its stream breaks; the DaemonSet's new pod on that node comes back, and
// the driver gives it the rest of the schedule (TestIntegrationLabEngineRejoin
// does the same with the pod's grace). The run fails with that node's GAP
// named, no node lost, and every other node's results are whole.
func TestIntegrationLabLostEngine(t *testing.T) {
	m := theLab(t)
	if len(m.Nodes) < 2 {
		t.Fatalf("the lab has %d node; a lost engine needs a survivor (soak lab up --nodes 2)", len(m.Nodes))
	}
	lost := m.Nodes[len(m.Nodes)-1]
	cs, err := kube.NewClient(m.Kubeconfig, m.Context, "sortie-lab-test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	t.Cleanup(func() { teardown(t, run) })

	started := &lineSignal{re: regexp.MustCompile(`^STEP load started`), hit: make(chan struct{})}
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		args := append(runArgs(m), "--duration", "60s", "--settle", "5s", "--watch-interval", "20s", "--dir", run)
		out, err := soakRun(t, ctx, filepath.Join(dir, "lost.txt"), started, args...)
		done <- result{out, err}
	}()
	select {
	case <-started.hit:
	case r := <-done:
		t.Fatalf("the run ended before its load started: %v", r.err)
	}
	time.Sleep(20 * time.Second) // the lost node has sent for a third of the run
	deleteEngine(t, ctx, cs, m.Namespace, lost)
	r := <-done
	logVerdicts(t, r.out)
	if cli.Code(r.err) != cli.ExitFail {
		t.Fatalf("soak run e2e with a lost engine: exit %d (%v), want %d", cli.Code(r.err), r.err, cli.ExitFail)
	}
	for _, re := range []string{
		`(?m)^SOAK FAIL gate=1 `,
		`(?m)^FAIL  \S+  .* GAP ` + regexp.QuoteMeta(lost) + ` \+`,
		`(?m)^NODE  \S+  ` + regexp.QuoteMeta(lost) + `  FAIL  .*-- GAP `,
		gapLine(lost).String(),
		`(?m)^VERDICT FAIL .* lost_backends=0 `,
	} {
		if !regexp.MustCompile(re).MatchString(r.out) {
			t.Errorf("no line matches %s", re)
		}
	}
	rep, err := record.ReadReportFile(filepath.Join(run, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	checkSurvivors(t, rep, lost)
}

// deleteEngine deletes the engine pod on node at once.
func deleteEngine(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, node string) {
	t.Helper()
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=engine", FieldSelector: "spec.nodeName=" + node})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("engine pods on %s: %v, %v; want one", node, pods, err)
	}
	zero := int64(0)
	if err := cs.CoreV1().Pods(ns).Delete(ctx, pods.Items[0].Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	t.Logf("DELETED engine pod %s on %s at %s", pods.Items[0].Name, node, time.Now().UTC().Format(time.RFC3339))
}

// checkSurvivors: every execution's results from the nodes other than
// lost are whole: every planned request answered 2xx.
func checkSurvivors(t *testing.T, r *record.Source, lost string) {
	t.Helper()
	for _, e := range r.Executions {
		survivors := 0
		for _, res := range e.Results {
			if res.BackendName == lost {
				continue
			}
			survivors++
			if res.Planned == 0 || res.Counters["benchmark.http_2xx"] != res.Planned {
				t.Errorf("%s on the surviving %s: http_2xx %d of %d planned", e.Label, res.BackendName, res.Counters["benchmark.http_2xx"], res.Planned)
			}
		}
		if survivors == 0 {
			t.Errorf("%s: no result from a surviving node", e.Label)
		}
		t.Logf("SURVIVORS %s: %d nodes whole", e.Label, survivors)
	}
}

// checkE2E holds a passed e2e run to its lines and its report.
func checkE2E(t *testing.T, out, run string, nodes []string) {
	t.Helper()
	want := []string{
		`(?m)^SOAK PASS gate=0 watchdog=PASS churn=none saver=saved dir=` + regexp.QuoteMeta(run) + `$`,
		fmt.Sprintf(`(?m)^VERDICT PASS targets=%d passed=%d failed=0 not_run=0 backends=%d lost_backends=0 report_pass=true$`, len(lab.Targets), len(lab.Targets), len(nodes)),
		`(?m)^SORTIE_SAVED dir=` + regexp.QuoteMeta(run) + ` job=complete .* pass=true not_run=0 `,
		`(?m)^SUMMARY restart-watch verdict=PASS new_restarts=0 `,
	}
	for _, re := range want {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no line matches %s", re)
		}
	}
	if _, err := os.Stat(filepath.Join(run, "SAVED")); err != nil {
		t.Errorf("the saver wrote no SAVED: %v", err)
	}
	r, err := record.ReadReportFile(filepath.Join(run, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, r, nodes)
}

// checkCounts: one execution per target, one result per node, and every
// planned request (rate x duration, exactly) answered 2xx.
func checkCounts(t *testing.T, r *record.Source, nodes []string) {
	t.Helper()
	if len(r.Executions) != len(lab.Targets) {
		t.Fatalf("%d executions, want one per target (%d)", len(r.Executions), len(lab.Targets))
	}
	for _, e := range r.Executions {
		planned := uint64(e.Rate * float64(e.DurationMs) / 1000)
		var got []string
		for _, res := range e.Results {
			got = append(got, res.BackendName)
			if res.Planned != planned || res.Counters["benchmark.http_2xx"] != planned {
				t.Errorf("%s on %s: planned %d, http_2xx %d; want %d of %d", e.Label, res.BackendName, res.Planned, res.Counters["benchmark.http_2xx"], planned, planned)
			}
			if res.Unsent != 0 {
				t.Errorf("%s on %s: %d planned requests unsent", e.Label, res.BackendName, res.Unsent)
			}
			if err := res.Conserves(); err != nil {
				t.Errorf("%s: %v", e.Label, err)
			}
			for k, v := range res.Counters {
				if v != 0 && record.InZeroFailureSet(k) {
					t.Errorf("%s on %s: %s=%d", e.Label, res.BackendName, k, v)
				}
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, nodes) {
			t.Errorf("%s: results from %v, want one from each node %v", e.Label, got, nodes)
		}
		t.Logf("COUNTS %s rate=%g/s per node x %ds: http_2xx=%d per node on %d nodes", e.Label, e.Rate, e.DurationMs/1000, planned, len(e.Results))
	}
}

// teardown uninstalls the run's release, so that the lab is as it was for
// the next test; a run that saved nothing is given up (--force).
func teardown(t *testing.T, run string) {
	if _, err := os.Stat(filepath.Join(run, "run.env")); err != nil {
		return
	}
	args := []string{"teardown", "--dir", run}
	if _, err := os.Stat(filepath.Join(run, "SAVED")); err != nil {
		args = append(args, "--force")
	}
	var out bytes.Buffer
	if err := soak.Run(context.Background(), args, &out, &out); err != nil {
		t.Errorf("soak teardown: %v\n%s", err, out.String())
	}
}

// TestIntegrationLabNetwork holds the running lab to its network rules:
// servers on loopback or the lab's bridge only; no pod has a default
// route; the lab's drops come before any other FORWARD rule and nothing
// masquerades the pods; CoreDNS answers the cluster's names and no other;
// an image named by a public registry is looked for in the loopback
// registry only. Every packet it sends goes to this machine's own
// addresses: the DNS queries to the cluster's DNS Service, the pull to the
// loopback registry.
func TestIntegrationLabNetwork(t *testing.T) {
	m := theLab(t)
	state := filepath.Dir(m.Kubeconfig)
	procs, err := lab.Procs(lab.Layout{State: state, Nodes: len(m.Nodes)})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := lab.Listeners(procs)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) < 10 {
		t.Errorf("only %d listening sockets found for the lab's processes: %v", len(ls), ls)
	}
	for _, l := range lab.OffLab(ls) {
		t.Errorf("listens off loopback and the lab's bridge: %s", l)
	}
	t.Logf("LISTEN %d sockets of the lab's processes, all on 127.0.0.0/8 or %s", len(ls), lab.LabNet)
	t.Run("pod routes", func(t *testing.T) { checkPodRoutes(t) })
	t.Run("rules", func(t *testing.T) { checkRuleOrder(t) })
	t.Run("dns", func(t *testing.T) { checkDNS(t) })
	t.Run("pull", func(t *testing.T) { checkPull(t, m) })
}

// checkPodRoutes: no pod network namespace has a default route.
func checkPodRoutes(t *testing.T) {
	nss, _ := filepath.Glob(filepath.Join(lab.NetnsDir, "cni-*"))
	if len(nss) == 0 {
		t.Fatal("no pod network namespace")
	}
	checked, torn := 0, 0
	for _, ns := range nss {
		out, err := exec.Command("ip", "netns", "exec", filepath.Base(ns), "ip", "route", "show").CombinedOutput()
		if err != nil {
			// A pod of an earlier test may finish terminating between the
			// listing and the look: a namespace that is gone routes nothing.
			if _, serr := os.Stat(ns); errors.Is(serr, fs.ErrNotExist) {
				continue
			}
			t.Fatalf("%s: %v: %s", ns, err, out)
		}
		if strings.TrimSpace(string(out)) == "" {
			// A namespace whose pod is terminating has lost its interface
			// before the namespace itself goes: an empty table routes nothing.
			torn++
			continue
		}
		checked++
		if strings.Contains(string(out), "default") || !strings.Contains(string(out), lab.ServiceCIDR) {
			t.Errorf("%s routes:\n%s", ns, out)
		}
	}
	if checked == 0 {
		t.Fatalf("every one of %d pod network namespaces vanished or was emptied before it was read", len(nss))
	}
	t.Logf("NETWORK %d pod namespaces, none with a default route (%d more being torn down, with no route at all)", checked, torn)
}

// checkRuleOrder: the lab's drops are the first rules of mangle FORWARD,
// and no NAT rule masquerades the pod network by its source.
func checkRuleOrder(t *testing.T) {
	out, err := exec.Command("iptables", "-w", "-t", "mangle", "-S", "FORWARD").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var v4 int
	for _, r := range lab.Rules() {
		if !r.IPv6 {
			v4++
		}
	}
	if len(lines) < 1+v4 {
		t.Fatalf("mangle FORWARD:\n%s", out)
	}
	for _, l := range lines[1 : 1+v4] {
		if !strings.Contains(l, "--comment "+lab.RuleComment) || !strings.HasSuffix(l, "-j DROP") {
			t.Errorf("mangle FORWARD does not start with the lab's drops:\n%s", out)
		}
	}
	nat, err := exec.Command("iptables", "-w", "-t", "nat", "-S").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, nat)
	}
	for _, l := range strings.Split(string(nat), "\n") {
		if strings.Contains(l, "-s "+lab.ClusterCIDR) && strings.Contains(l, "MASQUERADE") {
			t.Errorf("the pod network is masqueraded: %s", l)
		}
	}
}

// checkDNS asks the cluster's DNS Service for a cluster name and a name
// outside the cluster.
func checkDNS(t *testing.T) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort(lab.DNSServiceIP, "53"))
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addrs, err := r.LookupHost(ctx, "kubernetes.default.svc."+lab.ClusterDomain+".")
	if err != nil || !slices.Contains(addrs, lab.APIServiceIP) {
		t.Errorf("kubernetes.default: %v, %v; want %s", addrs, err, lab.APIServiceIP)
	}
	t0 := time.Now()
	addrs, err = r.LookupHost(ctx, "sortie-lab-check.example.com.")
	var de *net.DNSError
	if err == nil || !errors.As(err, &de) || de.IsTimeout {
		t.Fatalf("a name outside the cluster: %v, %v; want an answer from CoreDNS itself that it has none", addrs, err)
	}
	// (The error names the machine's resolver; the query went to the
	// cluster's, by the Dial above.)
	t.Logf("DNS kubernetes.default=%s; a name outside the cluster: %q from %s after %s", lab.APIServiceIP, de.Err, lab.DNSServiceIP, time.Since(t0).Round(time.Millisecond))
}

// checkAskedLoopback: the pull was refused by the loopback registry (its
// log has the request, for the name of Docker Hub), not by a closed proxy
// or a timeout.
func checkAskedLoopback(t *testing.T, state, msg string) {
	t.Helper()
	if !strings.Contains(msg, "not found") {
		t.Errorf("the pull failed, but not with the registry's not found: %s", msg)
	}
	b, err := os.ReadFile(filepath.Join(state, "logs", "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "/v2/library/busybox/manifests/1.36?ns=docker.io 404") {
		t.Errorf("the loopback registry was not asked for docker.io/library/busybox:1.36; the pull said: %s", msg)
	}
	t.Logf("PULL docker.io/library/busybox:1.36 asked the loopback registry: %s", msg)
}

// checkPull runs a pod whose image is named by Docker Hub and waits for its
// pull to fail at the loopback registry.
func checkPull(t *testing.T, m lab.Manifest) {
	cs, err := kube.NewClient(m.Kubeconfig, m.Context, "sortie-lab-test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "pull-check-", Namespace: m.Namespace},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: new(bool),
			Containers:                   []corev1.Container{{Name: "c", Image: "docker.io/library/busybox:1.36"}},
		},
	}
	pod, err = cs.CoreV1().Pods(m.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer deletePod(t, cs, m.Namespace, pod.Name)
	for {
		p, err := cs.CoreV1().Pods(m.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Status.ContainerStatuses {
			if w := c.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
				checkAskedLoopback(t, filepath.Dir(m.Kubeconfig), w.Message)
				return
			}
			if c.State.Running != nil {
				t.Fatalf("an image named by docker.io ran: %+v", c.State)
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the pull of a public image name neither failed nor ran: %+v", p.Status)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// deletePod deletes a pod at once and waits until it is gone, so that the
// tests after it find the namespace as the lab left it.
func deletePod(t *testing.T, cs kubernetes.Interface, ns, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	zero := int64(0)
	if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Errorf("delete pod %s/%s: %v", ns, name, err)
		return
	}
	for {
		if _, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return
		}
		select {
		case <-ctx.Done():
			t.Errorf("pod %s/%s still there after a minute", ns, name)
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}
