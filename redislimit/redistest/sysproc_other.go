//go:build !linux

package redistest

import "syscall"

// childAttr returns the attributes of a server's process: the default, as
// only Linux can tie a child's life to its parent's.
func childAttr() *syscall.SysProcAttr { return nil }
