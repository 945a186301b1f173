// Command sortie-plan renders a soak's plan and share table from a targets
// file; see package render.
package main

import (
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/render"
)

func main() { cli.Main("sortie-plan", render.Run) }
