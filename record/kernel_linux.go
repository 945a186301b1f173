package record

import "syscall"

// kernelRelease is uname's release field, empty if uname fails.
func kernelRelease() string {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return ""
	}
	return cString(u.Release[:])
}

// cString is a NUL-terminated C string; Utsname's fields are int8 on some
// architectures and uint8 on others.
func cString[T int8 | uint8](b []T) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
