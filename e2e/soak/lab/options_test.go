package lab

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/clock"
)

func env(vars map[string]string) Env {
	return Env{Getenv: func(k string) string { return vars[k] }, Euid: 1000, Clock: clock.NewFake(time.Unix(0, 0))}
}

func TestDefaultOptions(t *testing.T) {
	o := DefaultOptions(env(nil).Getenv)
	if o.Cache != "/var/cache/sortie-lab" || o.State != DefaultState || o.Nodes != 2 {
		t.Errorf("defaults %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	if o := DefaultOptions(env(map[string]string{"XDG_CACHE_HOME": "/home/u/.cache"}).Getenv); o.Cache != "/home/u/.cache/sortie-lab" {
		t.Errorf("cache with XDG_CACHE_HOME: %s", o.Cache)
	}
	if o := DefaultOptions(env(map[string]string{"XDG_CACHE_HOME": "relative"}).Getenv); o.Cache != "/var/cache/sortie-lab" {
		t.Errorf("a relative XDG_CACHE_HOME was used: %s", o.Cache)
	}
}

func TestValidateListsEveryProblem(t *testing.T) {
	o := DefaultOptions(env(nil).Getenv)
	o.State, o.Cache, o.Nodes, o.Registry, o.Packages, o.Timeout, o.Grace, o.Go = "rel", "/", 0, "10.0.0.1:5000", "maybe", 0, -1, ""
	err := o.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"--state", "--cache", "--nodes 0", "--registry", "loopback", "--packages", "--timeout", "--grace", "--go"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	o = DefaultOptions(env(nil).Getenv)
	for _, reg := range []string{"127.0.0.1", "127.0.0.1:0", "localhost:5000", "[::1]:5000x"} {
		o.Registry = reg
		if o.Validate() == nil {
			t.Errorf("registry %q accepted", reg)
		}
	}
	o.Registry, o.Nodes = "[::1]:5000", MaxNodes+1
	if err := o.Validate(); err == nil || strings.Contains(err.Error(), "--registry") {
		t.Errorf("err = %v; want only --nodes refused", err)
	}
}

// TestHelpDocumentsEveryFlag: each command's --help names every flag it
// takes, and exits 0.
func TestHelpDocumentsEveryFlag(t *testing.T) {
	for cmd, want := range map[string][]string{
		"build":  {"-state", "-cache", "-source", "-go"},
		"up":     {"-state", "-cache", "-source", "-go", "-nodes", "-registry", "-packages", "-images", "-timeout", "-grace"},
		"down":   {"-state", "-grace"},
		"status": {"-state"},
	} {
		var stdout, stderr bytes.Buffer
		if err := Run(context.Background(), env(nil), []string{cmd, "--help"}, &stdout, &stderr); err != nil {
			t.Errorf("%s --help: %v", cmd, err)
		}
		fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
		o := DefaultOptions(env(nil).Getenv)
		o.Flags(fs, cmd)
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n != len(want) {
			t.Errorf("%s has %d flags, the test knows %d", cmd, n, len(want))
		}
		for _, f := range want {
			if !strings.Contains(stderr.String(), "  "+f+" ") && !strings.Contains(stderr.String(), "  "+f+"\n") {
				t.Errorf("%s --help does not document %s:\n%s", cmd, f, stderr.String())
			}
		}
		if !strings.HasPrefix(stderr.String(), "Usage: soak lab "+cmd) {
			t.Errorf("%s --help starts %q", cmd, firstLine(stderr.String()))
		}
	}
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

func TestRunUsageErrors(t *testing.T) {
	for _, args := range [][]string{nil, {"sideways"}, {"up", "--nodes", "9"}, {"down", "extra"}, {"status", "--bogus"}} {
		var stdout, stderr bytes.Buffer
		err := Run(context.Background(), env(nil), args, &stdout, &stderr)
		if cli.Code(err) != cli.ExitUsage {
			t.Errorf("soak lab %v: exit %d (%v), want %d", args, cli.Code(err), err, cli.ExitUsage)
		}
	}
}

func TestUpAndDownNeedRoot(t *testing.T) {
	for _, args := range [][]string{{"up", "--source", "../../.."}, {"down"}} {
		cmd := args[0]
		var stdout, stderr bytes.Buffer
		err := Run(context.Background(), env(nil), append(args, "--state", t.TempDir()), &stdout, &stderr)
		if cli.Code(err) != cli.ExitFail || err == nil || !strings.Contains(err.Error(), "root") {
			t.Errorf("%s as non-root: %v", cmd, err)
		}
		var ee *cli.ExitError
		if !errors.As(err, &ee) {
			t.Errorf("%s: error %T is not an ExitError", cmd, err)
		}
	}
}

func TestStatusOfNoLab(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), env(nil), []string{"status", "--state", t.TempDir()}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stdout.String(), "LAB DOWN ") {
		t.Errorf("status of no lab: %q", stdout.String())
	}
}
