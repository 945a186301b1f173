// Package soak is the soak binary's dispatcher: it hands each command to
// the package of its job and holds no job itself.
//
//   - `soak local` (package local) runs the whole loop on one machine:
//     fixture targets behind local stand-ins for Services, one engine per
//     node and the driver as child processes, faults, rolling restarts, and
//     the gate's grade.
//   - `soak run e2e|soak` (package kickoff) launches the same loop on a
//     Kubernetes cluster.
//   - `soak teardown` (package teardown) uninstalls a run once its verdict
//     is saved.
//   - `soak lab` (package lab) is a real Kubernetes cluster on this machine.
//
// Package cluster holds what the kickoff and the teardown share. The binary
// also answers to the programs a local run starts as its child processes
// (engine, target, driver, gate; see local.Child), so one binary is all a
// run needs.
package soak
