package bench

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/sortie-soak/sortie/engine"
	"github.com/sortie-soak/sortie/internal/cli"
)

// Hidden subcommands: the bench starts its target and each engine as a
// child process of its own binary, so that each is pinned to its core and
// its CPU time and peak RSS are its own.
const (
	cmdTarget = "__target"
	cmdEngine = "__engine"
)

// targetBody is the whole answer of the target server.
var targetBody = []byte("ok")

// runTarget serves GET / with a two-byte body on --listen, prints
// "LISTEN <address>" on stdout, and serves until ctx ends.
func runTarget(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(cmdTarget, flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on")
	if err := fs.Parse(args); err != nil {
		return cli.Usage(err)
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return cli.Fail(fmt.Errorf("listen on %s: %w", *listen, err))
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write(targetBody)
		}),
		ReadHeaderTimeout: time.Minute,
	}
	if _, err := fmt.Fprintf(stdout, "LISTEN %s\n", lis.Addr()); err != nil {
		return cli.Fail(fmt.Errorf("write stdout: %w", err))
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served:
		return cli.Fail(fmt.Errorf("serve: %w", err))
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return nil
}

// runEngineChild serves one engine (engine.New, Serve) on --listen, prints
// "LISTEN <address>" on stdout, and stops it when ctx ends. With
// --cpuprofile it writes a CPU profile of its whole life.
func runEngineChild(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet(cmdEngine, flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve gRPC on")
	profile := fs.String("cpuprofile", "", "write a CPU profile to this file")
	if err := fs.Parse(args); err != nil {
		return cli.Usage(err)
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			return cli.Fail(fmt.Errorf("create cpu profile: %w", err))
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return cli.Fail(fmt.Errorf("start cpu profile: %w", err))
		}
		defer func() {
			pprof.StopCPUProfile()
			if cerr := f.Close(); cerr != nil && err == nil {
				err = cli.Fail(fmt.Errorf("write cpu profile: %w", cerr))
			}
		}()
	}
	// The garbage collector as sortie-engine sets it by default.
	restoreGC, err := engine.SetGC(engine.DefaultGCPercent, engine.DefaultMemoryLimitMiB)
	if err != nil {
		return cli.Fail(err)
	}
	defer restoreGC()
	e, err := engine.New(engine.Options{
		BackendName: "bench",
		Version:     engine.Version(),
		Logger:      slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return cli.Fail(err)
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return cli.Fail(fmt.Errorf("listen on %s: %w", *listen, err))
	}
	if _, err := fmt.Fprintf(stdout, "LISTEN %s\n", lis.Addr()); err != nil {
		_ = lis.Close()
		return cli.Fail(fmt.Errorf("write stdout: %w", err))
	}
	served := make(chan error, 1)
	go func() { served <- e.Serve(lis) }()
	select {
	case err := <-served:
		_ = e.Stop(context.Background())
		return cli.Fail(fmt.Errorf("serve: %w", err))
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Stop(sctx); err != nil {
		return cli.Fail(err)
	}
	return <-served
}

// server is a child process that serves on a loopback address: the target
// or an engine.
type server struct {
	name string
	cmd  *exec.Cmd
	addr string
	cpu  int // the core it is pinned to, -1 for none
	done chan struct{}
	err  error // of Wait, valid once done is closed
}

// startServer starts self with args on cpu (-1: unpinned) at nice value
// nice, with env added to the bench's environment, and waits for its
// "LISTEN <address>" line. The child's stderr goes to stderr.
func startServer(ctx context.Context, name string, self []string, args []string, cpu, nice int, env []string, stderr io.Writer) (*server, error) {
	cmd := exec.Command(self[0], append(append([]string(nil), self[1:]...), args...)...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stderr = stderr
	cmd.SysProcAttr = childAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	if err := startPinned(cmd, cpu, nice); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s := &server{name: name, cmd: cmd, cpu: cpu, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		// Read to the end so the child never blocks on a full pipe, and
		// only then Wait, which closes the pipe.
		_, _ = io.Copy(io.Discard, out)
		s.err = cmd.Wait()
		close(s.done)
	}()
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case line := <-lines:
		addr, ok := strings.CutPrefix(line, "LISTEN ")
		if !ok {
			_ = s.stop(time.Second)
			return nil, fmt.Errorf("%s: first line %q, want LISTEN <address>", name, line)
		}
		s.addr = addr
	case <-s.done:
		return nil, fmt.Errorf("%s exited before listening: %w", name, s.err)
	case <-t.C:
		_ = s.stop(time.Second)
		return nil, fmt.Errorf("%s did not listen within 30s", name)
	case <-ctx.Done():
		_ = s.stop(time.Second)
		return nil, ctx.Err()
	}
	if cpu >= 0 {
		if err := checkPinned(s.pid(), cpu); err != nil {
			_ = s.stop(time.Second)
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return s, nil
}

func (s *server) pid() int { return s.cmd.Process.Pid }

// stop sends SIGTERM and waits up to grace, then kills. It returns the
// child's exit error, nil for a clean exit.
func (s *server) stop(grace time.Duration) error {
	select {
	case <-s.done:
		return s.err
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-s.done:
		return s.err
	case <-t.C:
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	return fmt.Errorf("%s did not stop within %v; killed", s.name, grace)
}

// checkPinned confirms through /proc that pid may run on cpu only.
func checkPinned(pid, cpu int) error {
	st, err := readStatus(pid)
	if err != nil {
		return err
	}
	if len(st.CPUs) != 1 || st.CPUs[0] != cpu {
		return fmt.Errorf("pid %d may run on cpus %v, want only %d", pid, st.CPUs, cpu)
	}
	return nil
}
