//go:build !unix

package main

import "fmt"

// setNice is only possible on Unix; 0 (the default priority) is a no-op.
func setNice(pid, nice int) error {
	if nice == 0 {
		return nil
	}
	return fmt.Errorf("setting a nice value is not supported on this system")
}
