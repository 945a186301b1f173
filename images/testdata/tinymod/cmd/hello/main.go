// Command hello is the main package of the reproducibility tests.
package main

import (
	"fmt"

	"example.test/tinymod/lib/a"
)

func main() { fmt.Println(a.Greeting()) }
