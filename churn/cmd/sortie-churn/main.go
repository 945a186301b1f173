// Command sortie-churn runs a soak's churn schedule; see package churn.
package main

import (
	"github.com/sortie-soak/sortie/churn"
	"github.com/sortie-soak/sortie/internal/cli"
)

func main() { cli.Main("sortie-churn", churn.Run) }
