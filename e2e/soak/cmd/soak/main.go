// Command soak is the kickoff of a sortie soak; see package soak.
package main

import (
	"github.com/sortie-soak/sortie/e2e/soak"
	"github.com/sortie-soak/sortie/internal/cli"
)

func main() { cli.Main("soak", soak.Run) }
