// Package b is not imported by hello: changing it changes nothing.
package b

// Unused is never called by hello.
func Unused() int { return 1 }
