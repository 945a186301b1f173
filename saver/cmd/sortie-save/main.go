// Command sortie-save gets a sortie run's verdict out of the cluster before
// anything is torn down; see saver.Run.
package main

import (
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/saver"
)

func main() { cli.Main("sortie-save", saver.Run) }
