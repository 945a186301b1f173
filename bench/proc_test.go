package bench

import (
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseStat(t *testing.T) {
	sample, err := os.ReadFile("testdata/proc-stat.txt")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		in      string
		want    procStat
		wantErr bool
	}{
		{"command with spaces and parentheses", string(sample), procStat{UserTicks: 1234, SysTicks: 567, Nice: -10}, false},
		{"plain", "7 (go) R 1 7 7 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 1 0 0", procStat{UserTicks: 5, SysTicks: 6}, false},
		{"no parenthesis", "7 go R 1 7 7 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 1", procStat{}, true},
		{"too few fields", "7 (go) R 1 7 7 0 -1 0 0 0 0 0 5 6", procStat{}, true},
		{"utime not a number", "7 (go) R 1 7 7 0 -1 0 0 0 0 0 x 6 0 0 20 0 1 0 1", procStat{}, true},
		{"stime negative", "7 (go) R 1 7 7 0 -1 0 0 0 0 0 5 -6 0 0 20 0 1 0 1", procStat{}, true},
		{"empty", "", procStat{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parseStat (-want +got):\n%s", diff)
			}
		})
	}
	if got := (procStat{UserTicks: 3, SysTicks: 4}).CPU(); got != 70*time.Millisecond {
		t.Errorf("CPU = %v, want 70ms", got)
	}
}

func TestParseStatus(t *testing.T) {
	sample, err := os.ReadFile("testdata/proc-status.txt")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		in      string
		want    procStatus
		wantErr bool
	}{
		{"captured", string(sample), procStatus{HWMKiB: 15872, RSSKiB: 14012, CPUs: []int{1}}, false},
		{"only VmHWM", "Name:\tx\nVmHWM:\t  10 kB\n", procStatus{HWMKiB: 10}, false},
		{"no VmHWM (a zombie)", "Name:\tx\nState:\tZ (zombie)\nCpus_allowed_list:\t0-1\n", procStatus{}, true},
		{"VmHWM in another unit", "VmHWM:\t10 MB\n", procStatus{}, true},
		{"VmHWM not a number", "VmHWM:\tlots kB\n", procStatus{}, true},
		{"bad cpu list", "VmHWM:\t10 kB\nCpus_allowed_list:\t3-1\n", procStatus{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStatus([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parseStatus (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"", nil, false},
		{"1", []int{1}, false},
		{"0-1", []int{0, 1}, false},
		{"0-2,5,7-8", []int{0, 1, 2, 5, 7, 8}, false},
		{"2-1", nil, true},
		{"a", nil, true},
		{"1-", nil, true},
		{"-1", nil, true},
		{"0-100000", nil, true},
	}
	for _, tt := range tests {
		got, err := parseCPUList(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseCPUList(%q) err = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("parseCPUList(%q) (-want +got):\n%s", tt.in, diff)
		}
	}
}

func TestParseLoadavg(t *testing.T) {
	got, err := parseLoadavg([]byte("16.42 17.91 15.54 9/195 21917\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := [3]float64{16.42, 17.91, 15.54}; got != want {
		t.Errorf("parseLoadavg = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "1 2", "1 x 3"} {
		if _, err := parseLoadavg([]byte(bad)); err == nil {
			t.Errorf("parseLoadavg(%q) took it", bad)
		}
	}
}

// TestReadOwnProc reads this test's own /proc files, as the bench reads
// its children's.
func TestReadOwnProc(t *testing.T) {
	pid := os.Getpid()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	if _, err := readStat(pid); err != nil {
		t.Error(err)
	}
	st, err := readStatus(pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.HWMKiB == 0 || st.RSSKiB == 0 || len(st.CPUs) == 0 {
		t.Errorf("status %+v: want VmHWM, VmRSS and cpus", st)
	}
}

func FuzzParseStat(f *testing.F) {
	if b, err := os.ReadFile("testdata/proc-stat.txt"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("1 ()) R"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseStat(b)
	})
}

func FuzzParseStatus(f *testing.F) {
	if b, err := os.ReadFile("testdata/proc-status.txt"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("VmHWM: 1 kB\nCpus_allowed_list: 0-3,9\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseStatus(b)
		if err == nil && len(st.CPUs) > 0 && st.CPUs[0] < 0 {
			t.Errorf("negative cpu in %v", st.CPUs)
		}
	})
}
