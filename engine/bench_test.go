package engine

import (
	"bufio"
	"context"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

// fastServer answers every request with a fixed response, allocating
// nothing per request, so a benchmark measures the engine's side.
func fastServer(b *testing.B) string {
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	srv := newRawServer(b, func(c net.Conn, _ int64) {
		br := bufio.NewReaderSize(c, 4096)
		for readRequest(br) == nil {
			if _, err := c.Write(resp); err != nil {
				return
			}
		}
	})
	return srv.url()
}

// cpuTime is the process's user+system time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWorker runs one worker for b.N requests paced over one second,
// closed loop on up to 32 connections. ns/op is wall time per request
// (bounded below by the pacing and the loopback round trip), cpu-ns/op the
// process's CPU per request on both sides of the loopback connection (the
// test server is minimal), allocs/op what engine and server allocate per
// request (the server nothing).
func BenchmarkWorker(b *testing.B) {
	url := fastServer(b)
	r := req("bench", url, uint32(b.N), time.Second)
	r.OpenLoop = false
	r.Connections = 32
	r.MaxPendingRequests = 64
	sp, err := parseSpec(r, time.Now(), "")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	x := newExecution(sp, context.Background())
	if err := x.build(newSleeper); err != nil {
		b.Fatal(err)
	}
	x.start()
	<-x.done
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	res := x.result("")
	checkAccounting(b, res)
	if got := res.GetCounters()[record.HTTP2xx]; got != uint64(b.N) {
		b.Fatalf("2xx %d of %d: %v", got, b.N, res.GetCounters())
	}
}

// BenchmarkExecuteGRPC is the same through the gRPC API, as a driver or a
// bench command uses it: engine.New, Serve, Execute.
func BenchmarkExecuteGRPC(b *testing.B) {
	url := fastServer(b)
	te := startEngine(b, Options{})
	r := req("bench-grpc", url, uint32(b.N), time.Second)
	r.OpenLoop = false
	r.Connections = 32
	r.MaxPendingRequests = 64
	b.ReportAllocs()
	b.ResetTimer()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := te.client.Execute(ctx, r)
	if err != nil {
		b.Fatal(err)
	}
	var res *enginev1.Result
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		if x := ev.GetResult(); x != nil {
			res = x
		}
	}
	b.StopTimer()
	if got := res.GetCounters()[record.HTTP2xx]; got != uint64(b.N) {
		b.Fatalf("2xx %d of %d", got, b.N)
	}
}
