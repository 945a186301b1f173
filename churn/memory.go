package churn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

// Memory sampling. A soak's main finding is often memory that grows over
// hours, through restarts: a proxy that comes back larger after every roll
// holds state the control plane keeps pushing. So containers are sampled
// at the same age after each roll of the workloads asked for
// (--sample-after), and whenever a `sample` step says, and the first and
// last sample of each series are compared at the end.
//
// The numbers are the kubelet's own (its summary API, read through the API
// server's node proxy), so no agent and no exec into the pods is needed:
// the account needs get on nodes/proxy.

// MemoryHeader is the first line of the memory TSV.
const MemoryHeader = "time\tpod\tcontainer\trss_bytes\tage_s"

// maxSummary bounds one node's summary: a node of a few hundred pods
// answers in well under a megabyte.
const maxSummary = 16 << 20

// SummaryReader reads a node's kubelet summary (/stats/summary).
type SummaryReader interface {
	Summary(ctx context.Context, node string) ([]byte, error)
}

// ProxySummary reads the summary through the API server's node proxy.
type ProxySummary struct {
	// REST is a client of the core API group: a clientset's
	// CoreV1().RESTClient(), or one made for a test server.
	REST rest.Interface
}

var _ SummaryReader = ProxySummary{}

// Summary gets /api/v1/nodes/<node>/proxy/stats/summary.
func (p ProxySummary) Summary(ctx context.Context, node string) ([]byte, error) {
	rc, err := p.REST.Get().AbsPath("/api/v1/nodes", node, "proxy", "stats", "summary").Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxSummary+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxSummary {
		return nil, fmt.Errorf("node %s: summary larger than %d bytes", node, maxSummary)
	}
	return b, nil
}

// summary is the part of the kubelet's summary this reads.
type summary struct {
	Pods []struct {
		PodRef struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"podRef"`
		Containers []struct {
			Name      string    `json:"name"`
			StartTime time.Time `json:"startTime"`
			Memory    *struct {
				RSSBytes *uint64 `json:"rssBytes"`
			} `json:"memory"`
		} `json:"containers"`
	} `json:"pods"`
}

// MemorySample is one container's resident memory at one moment.
type MemorySample struct {
	Time      time.Time
	Namespace string
	Pod       string
	Container string
	Node      string
	RSSBytes  uint64
	// Age is how long the container had been running.
	Age time.Duration
	// Series names what the sample is compared with: the workload, node and
	// container, which a roll's new pod keeps.
	Series string
}

// ParseSummary returns the samples of the pods wanted (namespace/name ->
// true) in a node's summary, at t. A container without an RSS figure is
// left out, not read as zero.
func ParseSummary(b []byte, node string, wanted map[string]bool, t time.Time) ([]MemorySample, error) {
	var s summary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("node %s: summary: %w", node, err)
	}
	var out []MemorySample
	for _, p := range s.Pods {
		if !wanted[p.PodRef.Namespace+"/"+p.PodRef.Name] {
			continue
		}
		for _, c := range p.Containers {
			if c.Memory == nil || c.Memory.RSSBytes == nil {
				continue
			}
			age := time.Duration(0)
			if !c.StartTime.IsZero() && t.After(c.StartTime) {
				age = t.Sub(c.StartTime)
			}
			out = append(out, MemorySample{Time: t, Namespace: p.PodRef.Namespace, Pod: p.PodRef.Name,
				Container: c.Name, Node: node, RSSBytes: *c.Memory.RSSBytes, Age: age})
		}
	}
	return out, nil
}

// sampleMemory samples every running pod of ref, writes the TSV rows and a
// SAMPLED line, and keeps the samples for the summary. A sample that reads
// nothing is a FAILED line, not an abort: the schedule's rolls go on.
func (c *Churner) sampleMemory(ctx context.Context, ref Ref, why string) error {
	at := c.Clock.Now()
	samples, err := c.readMemory(ctx, ref, at)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil && len(samples) == 0 {
		err = errors.New("no container of its running pods has a memory figure")
	}
	if err != nil {
		c.line("SAMPLE FAILED %s at=%s (%s): %s", ref, stamp(at), why, oneLine(err))
		return nil
	}
	var rows strings.Builder
	var total uint64
	for _, s := range samples {
		fmt.Fprintf(&rows, "%s\t%s/%s\t%s\t%d\t%d\n", stamp(s.Time), s.Namespace, s.Pod, s.Container, s.RSSBytes, int64(s.Age/time.Second))
		total += s.RSSBytes
	}
	if c.MemoryOut != nil {
		if !c.memoryHeader {
			if _, err := io.WriteString(c.MemoryOut, MemoryHeader+"\n"); err != nil {
				c.Log.Warn("memory TSV not written", "err", err)
			}
			c.memoryHeader = true
		}
		if _, err := io.WriteString(c.MemoryOut, rows.String()); err != nil {
			c.Log.Warn("memory TSV not written", "err", err)
		}
	}
	c.memory = append(c.memory, samples...)
	c.line("SAMPLED %s at=%s (%s) containers=%d rss_bytes=%d", ref, stamp(at), why, len(samples), total)
	return nil
}

// readMemory lists ref's running pods and reads each node's summary once.
func (c *Churner) readMemory(ctx context.Context, ref Ref, at time.Time) ([]MemorySample, error) {
	obj, err := c.getWorkload(ctx, ref)
	if err != nil {
		return nil, err
	}
	sel, err := selectorOf(obj)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, c.Opts.RequestTimeout)
	pods, err := c.Client.CoreV1().Pods(ref.Namespace).List(rctx, metav1.ListOptions{LabelSelector: sel})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	byNode := map[string]map[string]bool{}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			continue
		}
		if byNode[p.Spec.NodeName] == nil {
			byNode[p.Spec.NodeName] = map[string]bool{}
		}
		byNode[p.Spec.NodeName][p.Namespace+"/"+p.Name] = true
	}
	nodes := make([]string, 0, len(byNode))
	for n := range byNode {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	var out []MemorySample
	for _, n := range nodes {
		rctx, cancel := context.WithTimeout(ctx, c.Opts.RequestTimeout)
		b, err := c.summaries().Summary(rctx, n)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("node %s: read the kubelet summary: %w", n, err)
		}
		got, err := ParseSummary(b, n, byNode[n], at)
		if err != nil {
			return nil, err
		}
		for i := range got {
			got[i].Series = ref.String() + " node=" + n + " container=" + got[i].Container
		}
		slices.SortFunc(got, func(a, b MemorySample) int {
			return strings.Compare(a.Pod+"/"+a.Container, b.Pod+"/"+b.Container)
		})
		out = append(out, got...)
	}
	return out, nil
}

// summaries is the SummaryReader to use: Summaries, or the node proxy.
func (c *Churner) summaries() SummaryReader {
	if c.Summaries != nil {
		return c.Summaries
	}
	return ProxySummary{REST: c.Client.CoreV1().RESTClient()}
}

// selectorOf is a workload's pod selector as a string.
func selectorOf(obj runtime.Object) (string, error) {
	var ls *metav1.LabelSelector
	switch o := obj.(type) {
	case *appsv1.Deployment:
		ls = o.Spec.Selector
	case *appsv1.DaemonSet:
		ls = o.Spec.Selector
	case *appsv1.StatefulSet:
		ls = o.Spec.Selector
	}
	s, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return "", fmt.Errorf("pod selector: %w", err)
	}
	if s.Empty() {
		return "", errors.New("the workload selects no pods")
	}
	return s.String(), nil
}

// memorySummary prints one MEMORY line per series: its first and last
// sample and the growth between them.
func (c *Churner) memorySummary() {
	type series struct {
		first, last MemorySample
		n           int
	}
	var order []string
	all := map[string]*series{}
	for _, s := range c.memory {
		x, ok := all[s.Series]
		if !ok {
			x = &series{first: s}
			all[s.Series] = x
			order = append(order, s.Series)
		}
		x.last = s
		x.n++
	}
	sort.Strings(order)
	for _, k := range order {
		x := all[k]
		growth := int64(x.last.RSSBytes) - int64(x.first.RSSBytes)
		pct := "n/a"
		if x.first.RSSBytes > 0 {
			pct = fmt.Sprintf("%+.1f%%", float64(growth)*100/float64(x.first.RSSBytes))
		}
		c.line("MEMORY %s samples=%d first=%d at=%s age=%s last=%d at=%s age=%s growth=%+d (%s)",
			k, x.n, x.first.RSSBytes, stamp(x.first.Time), secs(x.first.Age),
			x.last.RSSBytes, stamp(x.last.Time), secs(x.last.Age), growth, pct)
	}
}
