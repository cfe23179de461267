// Package migrations holds the versioned SQL schema, one folder per dialect,
// embedded into the binary and applied by `taskpilots migrate` and at serve start.
//
// Files follow goose's format: NNNNN_name.sql with a "-- +goose Up" and a
// "-- +goose Down" section; both dialect folders carry the same numbers, and a
// test checks that they do.
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed postgres/*.sql sqlite/*.sql
var files embed.FS

// FS returns the migration files of one dialect ("postgres" or "sqlite").
func FS(dialect string) (fs.FS, error) {
	return fs.Sub(files, dialect)
}
