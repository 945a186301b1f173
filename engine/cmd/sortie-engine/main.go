// Command sortie-engine runs sortie's load engine; see engine.Run.
package main

import (
	"github.com/sortie-soak/sortie/engine"
	"github.com/sortie-soak/sortie/internal/cli"
)

func main() { cli.Main("sortie-engine", engine.Run) }
