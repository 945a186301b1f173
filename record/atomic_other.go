//go:build !unix

package record

// isNotSupported: off Unix a directory cannot be opened for syncing the
// same way; a failure there is not a lost rename.
func isNotSupported(error) bool { return true }
