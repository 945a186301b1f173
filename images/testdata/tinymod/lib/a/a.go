// Package a is imported by hello: changing it changes the binary.
package a

// Greeting is what hello prints.
func Greeting() string { return "hello" }
