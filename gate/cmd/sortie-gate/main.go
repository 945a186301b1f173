// Command sortie-gate grades a sortie run's report or results stream per
// target and per node; see package gate.
package main

import (
	"github.com/sortie-soak/sortie/gate"
	"github.com/sortie-soak/sortie/internal/cli"
)

func main() { cli.Main("sortie-gate", gate.Run) }
