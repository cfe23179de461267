// Package cliout holds the small output helpers every subcommand of
// cmd/taskpilots shares, the drill (its own package) included.
package cliout

import (
	"fmt"
	"io"
	"os"
)

// Plural is "1 one" or "n many".
func Plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// IsTerminal reports whether w is a character device such as a terminal;
// pipes, files and test buffers are not.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
