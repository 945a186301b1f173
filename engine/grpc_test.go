package engine

import (
	"net/http"
	"strconv"
	"testing"
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
