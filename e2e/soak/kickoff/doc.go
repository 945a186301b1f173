// Package kickoff is `soak run e2e|soak`: the kickoff of a soak on a
// Kubernetes cluster. In order: the pre-flight and the provenance check,
// the engines alone, the plan rendered for the ready engines, the driver
// Job, the saver armed before the first look at the driver pod, the restart
// watchdog and the churn driver at T0, and the gate's grade of the saved
// report. Its run directory (run.env, the plan, the values, the logs) is
// what `soak teardown` (package teardown) later reads.
package kickoff
