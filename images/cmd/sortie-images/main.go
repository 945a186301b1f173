// Command sortie-images builds, checks, pins, pushes and releases sortie's
// OCI images; see package images.
package main

import (
	"os"

	"github.com/sortie-soak/sortie/images"
	"github.com/sortie-soak/sortie/internal/cli"
)

func main() { cli.Main("sortie-images", images.Env{LookupEnv: os.LookupEnv}.Run) }
