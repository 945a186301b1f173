package lab

import (
	"context"
	"fmt"
	"io"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sortie-soak/sortie/internal/kube"
)

// Status says what of the lab runs (soak lab status): each recorded
// process, alive or not, and, when the API server answers, each node's
// readiness. It returns an error when a recorded process is not running.
func Status(ctx context.Context, env Env, o Options, out io.Writer) error {
	l := o.Layout()
	procs, err := Procs(l)
	if err != nil {
		return err
	}
	if len(procs) == 0 {
		fmt.Fprintf(out, "LAB DOWN state=%s: no process recorded\n", o.State)
		return nil
	}
	dead := 0
	for _, p := range procs {
		state := "running"
		if !p.Alive {
			state, dead = "NOT RUNNING", dead+1
		}
		fmt.Fprintf(out, "PROCESS %s pid=%d %s log=%s\n", p.Name, p.PidFile.PID, state, LogPath(l, p.Name))
	}
	if m, err := ReadManifest(o.State); err == nil {
		fmt.Fprintf(out, "KUBECONFIG %s context=%s registry=%s up since %s\n", m.Kubeconfig, m.Context, m.Registry, m.Up.Format(time.RFC3339))
		statusNodes(ctx, m, out)
	}
	if dead > 0 {
		return fmt.Errorf("%d of the lab's %d processes are not running", dead, len(procs))
	}
	fmt.Fprintf(out, "LAB UP processes=%d\n", len(procs))
	return nil
}

func statusNodes(ctx context.Context, m Manifest, out io.Writer) {
	cs, err := kube.NewClient(m.Kubeconfig, m.Context, "sortie-lab")
	if err != nil {
		fmt.Fprintf(out, "NODES unknown: %v\n", err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, n := range m.Nodes {
		if err := NodeReady(cs, n)(ctx); err != nil {
			fmt.Fprintf(out, "NODE %s NOT READY: %v\n", n, err)
			continue
		}
		fmt.Fprintf(out, "NODE %s Ready\n", n)
	}
	if pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err == nil {
		fmt.Fprintf(out, "PODS %d\n", len(pods.Items))
	}
}
