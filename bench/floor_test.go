package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"testing"
	"time"
)

// The floor client sends exactly rate x duration requests and counts a
// non-2xx answer as an error.
func TestFloorLoop(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the floor client is Linux only")
	}
	for _, c := range []struct {
		status     int
		ok, errors uint64
	}{
		{http.StatusOK, 100, 0},
		{http.StatusServiceUnavailable, 0, 100},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(c.status)
		}))
		u, _ := url.Parse(srv.URL)
		rep, err := runFloorLoop(context.Background(), u.Host, u.Host, 200, 500*time.Millisecond, 5*time.Second, 2)
		srv.Close()
		if err != nil {
			t.Fatalf("status %d: %v", c.status, err)
		}
		if rep.Sent != 100 || rep.OK != c.ok || rep.Errors != c.errors {
			t.Errorf("status %d: sent %d ok %d errors %d, want 100 %d %d", c.status, rep.Sent, rep.OK, rep.Errors, c.ok, c.errors)
		}
	}
}

func TestParseFloor(t *testing.T) {
	r, err := parseFloor([]byte(`{"sent":10,"ok":9,"errors":1,"elapsed_ns":2000000000}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.Sent != 10 || r.OK != 9 || r.Errors != 1 || r.Rate != 5 {
		t.Errorf("%+v", r)
	}
	if _, err := parseFloor([]byte("not json")); err == nil {
		t.Error("no error for a report that is not JSON")
	}
}
