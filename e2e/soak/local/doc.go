// Package local is `soak local`: the whole soak loop on one machine.
//
// It runs fixture targets behind local stand-ins for Services, one engine
// per node as child processes on their own loopback addresses, the driver
// as a child process, and the gate; it injects faults (targets down or
// resetting a few requests, engines killed or frozen, the driver frozen)
// and rolling restarts of the targets, and writes each down with its begin
// and end (rolls.log, faults.log) in the format the churn driver's lines
// have. A run whose rolls touched nothing (no old replica held a connection
// or a request at SIGTERM) is UNOBSERVED, exit 3.
package local
