//go:build !linux

package testkit

import "syscall"

// procAttr returns the default process attributes: only Linux can tie the
// server's life to the test process.
func procAttr() *syscall.SysProcAttr { return nil }
