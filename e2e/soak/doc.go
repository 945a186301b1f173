// Package soak is the kickoff of a sortie soak: `soak local` runs the whole
// loop on one machine — fixture targets, one engine per node as child
// processes on their own loopback addresses, the driver, the gate — and
// injects faults (targets down, engines killed or frozen, the driver
// frozen) and rolling restarts of the targets.
package soak
