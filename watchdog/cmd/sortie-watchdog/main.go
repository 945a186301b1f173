// Command sortie-watchdog watches container restarts during a soak; see
// package watchdog.
package main

import (
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/watchdog"
)

func main() { cli.Main("sortie-watchdog", watchdog.Run) }
