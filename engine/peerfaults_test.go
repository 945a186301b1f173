package engine

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sortie-soak/sortie/fixture"
	"github.com/sortie-soak/sortie/record"
)

// startTarget runs a healthy sortie-target fixture on loopback.
func startTarget(t *testing.T) *fixture.Server {
	t.Helper()
	srv, err := fixture.New(fixture.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(); srv.Wait() })
	return srv
}

// TestPeerFaultsClassified runs the engine against each of sortie-target's
// peer faults, asked for by path, and checks the exact classification:
// every request in one outcome class, with its phase and reason, and the
// stray answer never taken for one.
func TestPeerFaultsClassified(t *testing.T) {
	t.Parallel()
	base := "http://" + startTarget(t).Addr(fixture.DefaultService)
	te := startEngine(t, Options{})
	resets := func(phase, reason string) map[string]uint64 {
		return map[string]uint64{record.StreamResets: 3, phase: 3, record.StreamResetsPrefix + reason: 3}
	}
	for _, c := range []struct {
		mode fixture.Mode
		want map[string]uint64
	}{
		{fixture.ModeGarbage, resets(record.ResetsBeforeHeaders, record.ReasonProtocolError)},
		{fixture.ModeShortBody, resets(record.ResetsIncompleteBody, record.ReasonConnectionTermination)},
		{fixture.ModeReset, resets(record.ResetsBeforeHeaders, record.ReasonRemoteReset)},
		{fixture.ModeSlowloris, map[string]uint64{record.RequestTimeout: 3}},
		{fixture.ModeNeverRead, map[string]uint64{record.RequestTimeout: 3}},
		{fixture.Mode503, map[string]uint64{record.HTTP5xx: 3}},
		// The stray 503 of each connection is seen before its next
		// request (the last one's may come after the run): counted on
		// the connection, never as an answer.
		{fixture.ModeStray, map[string]uint64{record.HTTP2xx: 3, record.ConnectionProtocolError: 0}},
	} {
		t.Run(string(c.mode), func(t *testing.T) {
			t.Parallel()
			r := req("peer-"+string(c.mode), base+"/fault/"+string(c.mode), 10, 300*time.Millisecond)
			r.Timeout = durationpb.New(5 * time.Second)
			r.RequestTimeout = durationpb.New(300 * time.Millisecond)
			res := te.execute(t, r).mustResult(t)
			if c.mode == fixture.ModeStray {
				n := res.GetCounters()[record.ConnectionProtocolError]
				if n < 2 || n > 3 {
					t.Errorf("%s = %d, want 2 or 3", record.ConnectionProtocolError, n)
				}
				c.want[record.ConnectionProtocolError] = n
			}
			wantCounters(t, res, c.want)
		})
	}
}
