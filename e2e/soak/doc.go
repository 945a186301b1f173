// Package soak is the kickoff of a sortie soak.
//
// `soak local` runs the whole loop on one machine: fixture targets behind
// local stand-ins for Services, one engine per node as child processes on
// their own loopback addresses, the driver as a child process, and the
// gate; it injects faults (targets down or resetting a few requests,
// engines killed or frozen, the driver frozen) and rolling restarts of the
// targets, and writes each down with its begin and end (rolls.log,
// faults.log) in the format the churn driver's lines have. A run whose
// rolls touched nothing (no old replica held a connection or a request at
// SIGTERM) is UNOBSERVED, exit 3.
//
// `soak run e2e|soak` launches the same loop on a Kubernetes cluster in
// order — pre-flight and provenance, the engines alone, the plan for the
// ready engines, the driver Job, the saver armed before the first look at
// the driver pod, the restart watchdog and the churn driver at T0 — and
// `soak teardown` uninstalls it once the verdict is saved.
package soak
