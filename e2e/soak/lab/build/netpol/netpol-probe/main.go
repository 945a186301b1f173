// Command netpol-probe is what the lab's tests run in a pod to learn
// whether that pod may reach a gRPC server: it dials each address once, asks
// the standard health service for its status within --timeout, prints one
// line per address and exits 0 if every address answered, 1 if any did not.
//
//	REACHED 10.244.1.7:8443 status=SERVING in 3ms
//	UNREACHED 10.244.1.7:8443 after 5s: context deadline exceeded
//
// It never retries: one real connection attempt per address is the
// evidence.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	timeout := flag.Duration("timeout", 5*time.Second, "how long each address has to `answer`")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "netpol-probe: give one or more host:port addresses")
		os.Exit(2)
	}
	failed := false
	for _, addr := range flag.Args() {
		if !probe(addr, *timeout) {
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// probe makes one connection to addr and one health check over it.
func probe(addr string, timeout time.Duration) bool {
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := grpc.Dial(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry())
	if err != nil {
		fmt.Printf("UNREACHED %s after %s: %v\n", addr, time.Since(t0).Round(time.Millisecond), err)
		return false
	}
	defer conn.Close() // grpc.Dial (the pinned grpc has no NewClient) does not connect until the call
	// WaitForReady: a refused or dropped connection is waited on until the
	// deadline, not failed at the first transient error, so that the
	// verdict is the deadline's, not a race with the dial.
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil {
		fmt.Printf("UNREACHED %s after %s: %v\n", addr, time.Since(t0).Round(time.Millisecond), err)
		return false
	}
	fmt.Printf("REACHED %s status=%s in %s\n", addr, resp.GetStatus(), time.Since(t0).Round(time.Millisecond))
	return true
}
