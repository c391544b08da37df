package redistest

import "syscall"

// childAttr returns the attributes of a server's process: on Linux, it is
// killed when the thread that started it ends, and so with the test
// process, even one that ends without its cleanup (a panic, os.Exit).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
