// Command sortie-bench measures the engine side by side with peer load
// generators; see package bench.
package main

import (
	"github.com/sortie-soak/sortie/bench"
	"github.com/sortie-soak/sortie/internal/cli"
)

func main() { cli.Main("sortie-bench", bench.Run) }
