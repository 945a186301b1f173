package engine

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/durationpb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/fixture"
	"github.com/sortie-soak/sortie/record"
)

// TestGRPCStatus: the trailer wins over a header, a trailers-only answer's
// header is read, and anything that is not one code of 0..16 is missing.
func TestGRPCStatus(t *testing.T) {
	for _, tc := range []struct {
		name            string
		header, trailer []string
		want            int
	}{
		{"trailer", nil, []string{"0"}, 0},
		{"trailers-only", []string{"14"}, nil, 14},
		{"trailer over header", []string{"14"}, []string{"0"}, 0},
		{"none", nil, nil, -1},
		{"out of range", nil, []string{"17"}, -1},
		{"negative", nil, []string{"-1"}, -1},
		{"not a number", nil, []string{"ok"}, -1},
		{"padded", nil, []string{"007"}, -1},
		{"two values", nil, []string{"0", "1"}, -1},
	} {
		resp := &http.Response{Header: http.Header{}, Trailer: http.Header{}}
		if tc.header != nil {
			resp.Header["Grpc-Status"] = tc.header
		}
		if tc.trailer != nil {
			resp.Trailer["Grpc-Status"] = tc.trailer
		}
		if got := grpcStatus(resp); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// FuzzGRPCStatus: any grpc-status a server sends reads as a code of 0..16
// that prints back as it was sent, or as missing.
func FuzzGRPCStatus(f *testing.F) {
	for _, s := range []string{"0", "14", "16", "17", "-0", "+1", "01", "", "9999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		resp := &http.Response{Header: http.Header{}, Trailer: http.Header{"Grpc-Status": {s}}}
		got := grpcStatus(resp)
		if got == -1 {
			return
		}
		if got < 0 || got > 16 || strconv.Itoa(got) != s {
			t.Fatalf("%q read as %d", s, got)
		}
	})
}

// TestGRPCFailuresSampled drives unary calls against the fixture's gRPC
// echo over h2c and finds every failed call in the live timeline: a 503
// window of three calls, answered HTTP 200 with grpc-status 14
// trailers-only and so in no HTTP class, leaves three samples of class
// grpc_status.14 (reason grpc_error) on the target's address; two resets
// leave their stream_resets samples only (one sample a failed call). The
// timeline's checks (CheckTimeline, CheckSamples) hold by the gRPC law.
func TestGRPCFailuresSampled(t *testing.T) {
	t.Parallel()
	status14 := record.GRPCStatusPrefix + "14"
	te := startEngine(t, Options{})
	for _, c := range []struct {
		name  string
		fault fixture.Fault
		want  map[string]int // samples by class
	}{
		{"unavailable", fixture.Fault{Mode: fixture.Mode503, Count: 3}, map[string]int{status14: 3}},
		{"reset", fixture.Fault{Mode: fixture.ModeReset, Count: 2}, map[string]int{record.StreamResets: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, err := fixture.New(fixture.Options{H2C: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close(); s.Wait() })
			if err := s.Set(fixture.DefaultService, c.fault); err != nil {
				t.Fatal(err)
			}
			addr := s.Addr(fixture.DefaultService)
			r := h2Req("grpc-"+c.name, "http://"+addr+"/acme.Greeter/SayHello")
			r.Grpc = &enginev1.GRPC{Mode: enginev1.GRPC_UNARY}
			r.Body = []byte("hello")
			r.ProgressInterval = durationpb.New(50 * time.Millisecond)
			_, samples := checkTimeline(t, te.execute(t, r), addr)
			got := map[string]int{}
			for _, sm := range samples {
				got[sm.Class]++
				if strings.HasPrefix(sm.Class, record.GRPCStatusPrefix) && (sm.Reason != record.GRPCError || sm.Remote != addr || sm.Status != 0) {
					t.Errorf("sample %+v: want reason %s, remote %s, no HTTP status", sm, record.GRPCError, addr)
				}
			}
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("samples by class (-want +got):\n%s", d)
			}
		})
	}
}
