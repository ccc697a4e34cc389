package testkit

import "syscall"

// procAttr makes a test server die with the test process (for example when
// a test times out and cleanups never run).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
