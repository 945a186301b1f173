// Command sortie-images builds, checks, pins and pushes sortie's OCI
// images; see package images.
package main

import (
	"github.com/sortie-soak/sortie/images"
	"github.com/sortie-soak/sortie/internal/cli"
)

func main() { cli.Main("sortie-images", images.Run) }
