package kickoff

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	chart "github.com/sortie-soak/sortie/charts"
	"github.com/sortie-soak/sortie/e2e/soak/cluster"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/record"
	"github.com/sortie-soak/sortie/saver"
)

// TestRunFlags holds the flags of soak run to their meaning and refuses
// unusable ones with exit 2 before anything is asked of a cluster.
func TestRunFlags(t *testing.T) {
	dir := t.TempDir()
	targets := filepath.Join(dir, "targets.txt")
	write(t, targets, "svc-a  http://svc-a.soak.test:8080/  3\nsvc-b  http://svc-b.soak.test:8080/  3\necho   http://echo.soak.test:8080/   1\n")
	base := []string{"--context", "kind-soak", "--targets", targets, "--reader-image", kReader}
	tests := []struct {
		name    string
		args    []string
		wantErr []string // substrings of the usage error; none: the flags parse
		check   func(t *testing.T, o RunOptions)
	}{
		{
			name: "defaults",
			args: append([]string{"e2e"}, base...),
			check: func(t *testing.T, o RunOptions) {
				want := DefaultRunOptions()
				want.Profile, want.Context, want.TargetsFile, want.ReaderImage = "e2e", "kind-soak", targets, kReader
				if diff := cmp.Diff(want, o); diff != "" {
					t.Errorf("options (-want +got):\n%s", diff)
				}
				if o.PlannedDuration().String() != "15m0s" {
					t.Errorf("planned duration %s", o.PlannedDuration())
				}
			},
		},
		{
			name: "every flag",
			args: append([]string{"soak"}, append(base, "--namespace", "aether-test", "--release", "nightly",
				"--rate", "42", "--duration", "8h", "--statsd", "10.0.0.1:9125", "--storage-class", "local-path",
				"--verify", "--identity", "https://github.com/x/y/.github/workflows/publish.yml@refs/heads/main",
				"--issuer", "https://token.actions.githubusercontent.com", "--trusted-root", "trusted_root.json", "--rolls", "churn/schedules/soak.txt",
				"--dir", "runs/n1", "--settle", "1m", "--priority-class", "soak-loader", "--priority-value", "2000",
				"--system-namespaces", "kube-system,aether-system", "--watch-namespaces", "aether-system,aether-ingress",
				"--watch-interval", "1m", "--reader-command", "/bin/cat --", "--engines-timeout", "10m",
				"--pod-timeout", "4m", "--poll", "5s", "--kubeconfig", "/k/config", "--values", "v.yaml")...),
			check: func(t *testing.T, o RunOptions) {
				if o.Rate != 42 || o.Duration.String() != "8h0m0s" || o.PriorityValue != 2000 ||
					!cmp.Equal(o.SystemNamespaces, []string{"kube-system", "aether-system"}) ||
					!cmp.Equal(o.WatchNamespaces, []string{"aether-system", "aether-ingress"}) ||
					o.ReaderCommand != "/bin/cat --" || !o.Verify || o.Rolls != "churn/schedules/soak.txt" ||
					o.Kubeconfig != "/k/config" || o.ValuesFile != "v.yaml" || o.Settle.String() != "1m0s" {
					t.Errorf("options: %+v", o)
				}
			},
		},
		{
			// Bare integers are seconds, as run.sh's flags took them.
			name: "bare seconds",
			args: append([]string{"e2e"}, append(base, "--settle", "120", "--watch-interval", "60", "--duration", "900")...),
			check: func(t *testing.T, o RunOptions) {
				if o.Settle != 2*time.Minute || o.WatchInterval != time.Minute || o.Duration != 15*time.Minute {
					t.Errorf("settle %v watch-interval %v duration %v; want 2m0s 1m0s 15m0s", o.Settle, o.WatchInterval, o.Duration)
				}
			},
		},
		{name: "no profile", args: base, wantErr: []string{"needs a profile"}},
		{name: "bad profile", args: append([]string{"local"}, base...), wantErr: []string{`profile "local"`}},
		{name: "no context", args: []string{"e2e", "--targets", targets, "--reader-image", kReader}, wantErr: []string{"--context is required"}},
		{name: "soak without rolls", args: append([]string{"soak"}, base...), wantErr: []string{"soak needs --rolls"}},
		{
			name: "memory samples",
			args: append([]string{"soak"}, append(base, "--rolls", "r.txt", "--sample-after", "aether-system/daemonset/aether-proxy,aether-test/deployment/svc-1", "--sample-age", "600")...),
			check: func(t *testing.T, o RunOptions) {
				if !cmp.Equal(o.SampleAfter, []string{"aether-system/daemonset/aether-proxy", "aether-test/deployment/svc-1"}) || o.SampleAge != 10*time.Minute {
					t.Errorf("sample-after %v sample-age %v", o.SampleAfter, o.SampleAge)
				}
			},
		},
		{name: "sample-after without rolls", args: append([]string{"e2e", "--sample-after", "a/deployment/b"}, base...), wantErr: []string{"--sample-after needs --rolls"}},
		{name: "bad sample-after", args: append([]string{"soak", "--rolls", "r.txt", "--sample-after", "aether-proxy"}, base...), wantErr: []string{`--sample-after "aether-proxy"`}},
		{
			name: "every problem at once",
			args: []string{"e2e", "--rate", "0", "--duration", "1.5s", "--statsd", "statsd:9125", "--release", "Soak_1",
				"--key", "k.pub", "--poll", "0s", "--priority-value", "-1", "--reader-command", "cat"},
			wantErr: []string{"--context is required", "--targets is required", "--rate 0", "--duration 1.5s",
				`--statsd "statsd:9125"`, `--release "Soak_1"`, "need --verify", "--poll must be positive",
				"--priority-value -1", "--reader-command needs --reader-image"},
		},
		{name: "verify without key or identity", args: append([]string{"e2e", "--verify"}, base...), wantErr: []string{"--verify needs --key"}},
		{name: "verify with both", args: append([]string{"e2e", "--verify", "--key", "k", "--identity", "i", "--issuer", "s"}, base...), wantErr: []string{"not both"}},
		{name: "keyless without trusted root", args: append([]string{"e2e", "--verify", "--identity", "i", "--issuer", "s"}, base...), wantErr: []string{"--trusted-root FILE"}},
		{name: "bad chart digest", args: append([]string{"e2e", "--chart-digest", "sha256:ABC"}, base...), wantErr: []string{`--chart-digest "sha256:ABC"`}},
		{name: "extra argument", args: append([]string{"e2e", "now"}, base...), wantErr: []string{"unexpected arguments: now"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			o, help, err := parseRunFlags(tt.args, &stderr)
			if help {
				t.Fatal("help")
			}
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				tt.check(t, o)
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestRunUsageExits checks the exit codes of unusable input through the
// command: bad flags, a targets file whose rate does not split, an
// unreadable schedule, and --help.
func TestRunUsageExits(t *testing.T) {
	fx := newKfix(t)
	bad := filepath.Join(fx.tmp, "bad-rolls.txt")
	write(t, bad, "5 roll deployment/svc-a\n3 roll deployment/svc-b\n")
	tests := []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"help", []string{"run", "--help"}, cli.ExitOK, "Usage: soak run e2e|soak"},
		{"profile help", []string{"run", "e2e", "--help"}, cli.ExitOK, "Usage: soak run e2e|soak"},
		{"unknown flag", []string{"run", "e2e", "--bogus"}, cli.ExitUsage, "flag provided but not defined"},
		{"rate does not split", fx.runArgs(ProfileE2E, "--rate", "20"), cli.ExitUsage, ""},
		{"bad schedule", fx.runArgs(ProfileSoak, "--rolls", bad), cli.ExitUsage, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newKfix(t)
			err := fx.run(tt.args...)
			if got := exitCode(err); got != tt.code {
				t.Errorf("exit %d, want %d: %v", got, tt.code, err)
			}
			if !strings.Contains(fx.stderr.String(), tt.out) {
				t.Errorf("stderr lacks %q:\n%s", tt.out, fx.stderr.String())
			}
			if len(fx.componentsCreated) != 0 {
				t.Errorf("a client was made: %v", fx.componentsCreated)
			}
		})
	}
}

// TestRunEnvWrittenAndReadAlike: the kickoff writes run.env with record's
// writer, and the saver and the teardown read it with record's reader, so
// values a shell would split or strip (a kubeconfig path with spaces, a
// reader command with arguments, a quote) reach both exactly.
func TestRunEnvWrittenAndReadAlike(t *testing.T) {
	o := DefaultRunOptions()
	o.Profile, o.Context, o.Kubeconfig = "e2e", "kind-soak", " /home/a b/it's kube config "
	o.ReaderImage, o.ReaderCommand = kReader, "/bin/cat --"
	o.PriorityClass = "sortie-soak"
	k := &kickoff{o: o, dir: t.TempDir(), tag: "e2e-1", names: chart.NamesFor(o.Release),
		pvc: "soak-sortie-report", reportName: "r.json", streamName: "r.jsonl", backends: 2}
	if err := k.writeRunEnv(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(k.dir, cluster.RunEnvFile)
	if err := record.AppendEnv(path, record.EnvPair{Key: "LOAD_START", Value: "2031-03-04T10:00:00Z"}); err != nil {
		t.Fatal(err)
	}
	vals, err := record.ReadEnvFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"KUBECONFIG": o.Kubeconfig, "RELEASE": "soak", "PRIORITY_CLASS": "sortie-soak",
		"READER_COMMAND": "/bin/cat --", "JOB": k.names.Job} {
		if got := vals.Get(key); got != want {
			t.Errorf("teardown reads %s=%q, want %q", key, got, want)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env, err := saver.ParseRunEnv(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Validate(); err != nil {
		t.Errorf("the saver refuses the kickoff's run.env: %v", err)
	}
	if env.Context != "kind-soak" || env.Job != k.names.Job || !cmp.Equal(env.ReaderCommand, []string{"/bin/cat", "--"}) ||
		env.LoadStart.IsZero() || env.PlannedDuration != o.PlannedDuration() {
		t.Errorf("the saver reads %+v", env)
	}
}

func TestReaderDefaultsToTheDriverImage(t *testing.T) {
	const driver = "ghcr.io/sortie-soak/sortie@sha256:" + "d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0"
	for _, tc := range []struct {
		image, command         string
		wantImage, wantCommand string
	}{
		{"", "", driver, DriverCat},
		{"busybox@sha256:ab", "", "busybox@sha256:ab", "cat"},
		{"busybox@sha256:ab", "/bin/cat --", "busybox@sha256:ab", "/bin/cat --"},
	} {
		o := RunOptions{ReaderImage: tc.image, ReaderCommand: tc.command}
		img, cmd := o.reader(driver)
		if img != tc.wantImage || cmd != tc.wantCommand {
			t.Errorf("reader(%q, %q) = %q, %q; want %q, %q", tc.image, tc.command, img, cmd, tc.wantImage, tc.wantCommand)
		}
	}
}
