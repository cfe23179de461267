package cliout

import (
	"bytes"
	"os"
	"testing"
)

func TestPlural(t *testing.T) {
	if got := Plural(1, "problem", "problems"); got != "1 problem" {
		t.Errorf("Plural(1) = %q", got)
	}
	if got := Plural(3, "problem", "problems"); got != "3 problems" {
		t.Errorf("Plural(3) = %q", got)
	}
}

func TestIsTerminal(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(&bytes.Buffer{}) || IsTerminal(f) {
		t.Error("a buffer or a regular file is not a terminal")
	}
	if tty, err := os.OpenFile("/dev/null", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		if !IsTerminal(tty) { // a character device, as a terminal is
			t.Error("/dev/null is a character device")
		}
	}
}
