//go:build unix

package main

import "syscall"

// setNice sets a process's nice value (scheduling priority).
func setNice(pid, nice int) error {
	return syscall.Setpriority(syscall.PRIO_PROCESS, pid, nice)
}
