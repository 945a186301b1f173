package cli

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{in: "120", want: 120 * time.Second},
		{in: "3", want: 3 * time.Second},
		{in: "0", want: 0},
		{in: " 7 ", want: 7 * time.Second},
		{in: "-5", want: -5 * time.Second},
		{in: "2m", want: 2 * time.Minute},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "500ms", want: 500 * time.Millisecond},
		{in: "0s", want: 0},
		{in: "", bad: true},
		{in: "   ", bad: true},
		{in: "3.5", bad: true}, // a fraction of seconds needs its unit
		{in: "two", bad: true},
		{in: "9223372037", bad: true}, // seconds beyond the largest duration
		{in: "9223372036", want: 9223372036 * time.Second},
		{in: strings.Repeat("1", 65), bad: true},
	} {
		got, err := ParseDuration(tc.in)
		if tc.bad {
			if !errors.Is(err, ErrDuration) {
				t.Errorf("ParseDuration(%q) = %v, %v; want an ErrDuration", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestDurationVarFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
		bad  bool
	}{
		{args: nil, want: 2 * time.Second}, // the default stays
		{args: []string{"--budget", "3"}, want: 3 * time.Second},
		{args: []string{"--budget=120"}, want: 2 * time.Minute},
		{args: []string{"--budget", "1m30s"}, want: 90 * time.Second},
		{args: []string{"--budget", "3x"}, bad: true},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var d time.Duration
		DurationVar(fs, &d, "budget", 2*time.Second, "a budget")
		err := fs.Parse(tc.args)
		if tc.bad {
			if err == nil || !strings.Contains(err.Error(), "budget") {
				t.Errorf("%v: err %v, want a refusal naming the flag", tc.args, err)
			}
			continue
		}
		if err != nil || d != tc.want {
			t.Errorf("%v: %v, %v; want %v", tc.args, d, err, tc.want)
		}
		// The printed value reads back to the same duration.
		back, err := ParseDuration(fs.Lookup("budget").Value.String())
		if err != nil || back != d {
			t.Errorf("%v: String %q reads back as %v, %v", tc.args, fs.Lookup("budget").Value.String(), back, err)
		}
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"120", "2m", "", "-1", "9223372036", "1h30m", "3.5", "1e9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			if !errors.Is(err, ErrDuration) {
				t.Fatalf("%q: error %v is not an ErrDuration", s, err)
			}
			return
		}
		// Whatever is accepted prints and reads back unchanged.
		back, err := ParseDuration(d.String())
		if err != nil || back != d {
			t.Fatalf("%q = %v; its String %q reads back as %v, %v", s, d, d.String(), back, err)
		}
	})
}
