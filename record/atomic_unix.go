//go:build unix

package record

import (
	"errors"
	"syscall"
)

func isNotSupported(err error) bool {
	return errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP)
}
