// Package envflag reads flag defaults from TASKPILOTS_* environment
// variables for every subcommand of cmd/taskpilots (the drill, in its own
// package, included), and remembers malformed values, so that a typo in the
// environment is reported instead of silently falling back to the default.
package envflag

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Defaults reads variables through Getenv.
type Defaults struct {
	Getenv func(string) string
	errs   []error
}

// String returns the variable or def.
func (d *Defaults) String(key, def string) string {
	if v := d.Getenv(key); v != "" {
		return v
	}
	return def
}

// parse returns the variable parsed by p, or def when it is unset or
// malformed (remembered, with what it should have been).
func parse[T any](d *Defaults, key string, def T, want string, p func(string) (T, error)) T {
	v := d.Getenv(key)
	if v == "" {
		return def
	}
	x, err := p(v)
	if err != nil {
		d.errs = append(d.errs, fmt.Errorf("%s=%q: want %s", key, v, want))
		return def
	}
	return x
}

// Bool returns the variable parsed as a boolean, or def when it is unset.
func (d *Defaults) Bool(key string, def bool) bool {
	return parse(d, key, def, "true or false", strconv.ParseBool)
}

// Int returns the variable parsed as an integer, or def when it is unset.
func (d *Defaults) Int(key string, def int) int {
	return parse(d, key, def, "an integer", strconv.Atoi)
}

// Int64 is Int for 64-bit values such as byte sizes.
func (d *Defaults) Int64(key string, def int64) int64 {
	return parse(d, key, def, "an integer", func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) })
}

// Float64 returns the variable parsed as a number, or def when it is unset.
func (d *Defaults) Float64(key string, def float64) float64 {
	return parse(d, key, def, "a number", func(s string) (float64, error) { return strconv.ParseFloat(s, 64) })
}

// Duration returns the variable parsed by time.ParseDuration, or def.
func (d *Defaults) Duration(key string, def time.Duration) time.Duration {
	return parse(d, key, def, "a duration such as 30s or 5m", time.ParseDuration)
}

// Err joins every malformed variable seen so far; nil when there was none.
func (d *Defaults) Err() error { return errors.Join(d.errs...) }
