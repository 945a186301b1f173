package driver

import (
	"context"
	"fmt"

	"github.com/sortie-soak/sortie/driver/plan"
)

// resolvePools resolves every pool the plan's scenarios use, once: a
// services pool as written, a dns pool through the resolver. It returns
// the backends by pool name and the dns name by pool name.
func resolvePools(ctx context.Context, o Options, p *plan.Plan) (map[string][]string, error) {
	used := map[string]bool{}
	for _, s := range p.Scenarios {
		used[s.Pool] = true
	}
	out := map[string][]string{}
	for _, pl := range p.Pools {
		if !used[pl.Name] {
			continue
		}
		if pl.DNS == "" {
			out[pl.Name] = append([]string(nil), pl.Services...)
			continue
		}
		addrs, err := resolveDNS(ctx, o, pl.DNS)
		if err != nil {
			return nil, fmt.Errorf("pool %s: %w", pl.Name, err)
		}
		out[pl.Name] = addrs
	}
	return out, nil
}

// fromCompiled converts a compiled plan into the runner's scenarios.
func fromCompiled(c *plan.Compiled) []*scenarioRun {
	var out []*scenarioRun
	for _, cs := range c.Scenarios {
		sc := &scenarioRun{
			name:     cs.Name,
			pool:     cs.Pool.Name,
			dns:      cs.Pool.DNS,
			backends: append([]string(nil), cs.Backends...),
		}
		for _, st := range cs.Stages {
			sr := &stageRun{name: st.Name}
			for _, ex := range st.Executions {
				sr.execs = append(sr.execs, &execRun{
					label:      ex.Label,
					rate:       ex.Rate,
					perBackend: ex.PerBackend,
					duration:   ex.Duration,
					ramp:       ex.Ramp,
					timeout:    ex.Timeout,
					thresholds: ex.Thresholds,
					requests:   ex.Requests,
					planned:    ex.Planned,
				})
			}
			sc.stages = append(sc.stages, sr)
		}
		out = append(out, sc)
	}
	return out
}
