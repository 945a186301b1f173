// Command sortie runs, validates and compiles sortie load plans.
package main

import (
	"github.com/sortie-soak/sortie/driver"
	"github.com/sortie-soak/sortie/internal/cli"
)

func main() { cli.Main("sortie", driver.Run) }
