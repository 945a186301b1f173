package driver

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

// madeBy describes what makes this run: the driver and its host, the plan
// as it was read, and every engine of the scenarios' pools as its Info
// call describes it. The calls run together, each bounded by InfoTimeout,
// before any load, and each waits for its engine to take a connection:
// the dispatch after them does not (a refused connection loses the
// backend at once). An engine that does not answer is recorded as unknown,
// with why; that never fails the run (its executions find out on their
// own what is wrong with it).
func (r *runner) madeBy(ctx context.Context, planPath string, planData []byte, scenarios []*scenarioRun) *record.MadeBy {
	mb := &record.MadeBy{Driver: record.ThisProgram(), Plan: record.PlanOf(planPath, planData)}
	var backends []string
	seen := map[string]bool{}
	for _, sc := range scenarios {
		for _, b := range sc.backends {
			if !seen[b] {
				seen[b] = true
				backends = append(backends, b)
			}
		}
	}
	mb.Engines = make([]record.EngineInfo, len(backends))
	caps := make([]uint32, len(backends))
	var wg sync.WaitGroup
	for i, b := range backends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mb.Engines[i], caps[i] = r.engineInfo(ctx, b)
		}()
	}
	wg.Wait()
	r.caps = map[string]uint32{}
	for i, b := range backends {
		if caps[i] > 0 {
			r.caps[b] = caps[i]
		}
	}
	return mb
}

// engineInfo asks one engine for its Info, and returns with it the
// engine's cap of concurrent executions (0 when not known).
func (r *runner) engineInfo(ctx context.Context, backend string) (record.EngineInfo, uint32) {
	unknown := func(err error) (record.EngineInfo, uint32) {
		r.log.Warn("engine info unknown", "backend", backend, "err", err)
		return record.EngineInfo{Backend: backend, Unknown: true, Error: fmt.Sprintf("info: %v", err)}, 0
	}
	client, err := r.client(backend)
	if err != nil {
		return unknown(err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.InfoTimeout)
	defer cancel()
	// WaitForReady: an engine that refuses the first connection is given
	// until InfoTimeout to take one. A driver pod's new address is let
	// through a NetworkPolicy only once the enforcer has seen the pod, so
	// the first connections of a driver that just started (or resumed)
	// may be refused; this call is the run's first, before any load, and
	// the dispatch after it finds the connection up.
	info, err := client.Info(ctx, &enginev1.InfoRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return unknown(err)
	}
	return engineInfoOf(backend, info), info.GetMaxConcurrentExecutions()
}

// engineInfoOf is what the report records of an engine's Info.
func engineInfoOf(backend string, info *enginev1.InfoResponse) record.EngineInfo {
	return record.EngineInfo{
		Backend: backend,
		Node:    info.GetBackendName(),
		Program: record.Program{
			Version:     info.GetVersion(),
			VCSRevision: info.GetVcsRevision(),
			VCSModified: info.GetVcsModified(),
			GoVersion:   info.GetGoVersion(),
			Kernel:      info.GetKernel(),
			CPUs:        int(info.GetCpus()),
			GOMAXPROCS:  int(info.GetGomaxprocs()),
		},
	}
}
