//go:build !linux

package main

import (
	"os"
	"syscall"
)

// childProcAttr has nothing to add outside Linux.
func childProcAttr() *syscall.SysProcAttr { return nil }

// fileOwner is unknown outside Linux.
func fileOwner(os.FileInfo) (uint32, bool) { return 0, false }
