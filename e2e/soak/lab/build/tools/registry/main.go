// Command registry is the lab cluster's OCI registry: go-containerregistry's
// in-memory registry on one loopback address. Every image name the lab's
// containerd may be asked for resolves here and nowhere else.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:5000", "loopback `address` to serve on")
	flag.Parse()
	if err := serve(*addr); err != nil {
		fmt.Fprintln(os.Stderr, "registry:", err)
		os.Exit(1)
	}
}

func serve(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--listen %s: not a loopback address", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.Printf("serving on %s", ln.Addr())
	s := &http.Server{Handler: registry.New(), ReadHeaderTimeout: 10 * time.Second}
	return s.Serve(ln)
}
