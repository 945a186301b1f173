//go:build !linux

package record

// kernelRelease is empty off Linux: the record's engines and drivers run
// on Linux, and the standard library has no uname elsewhere.
func kernelRelease() string { return "" }
