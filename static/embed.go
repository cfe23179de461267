// Package static holds the browser assets, embedded into the binary so that
// one file serves the whole console: app.css (the design system), app.js
// (htmx configuration and small behaviours; the CSP forbids inline scripts)
// and htmx.min.js, vendored from npm package htmx.org 2.0.11
// (`npm pack htmx.org@2`, dist/htmx.min.js; see README.md), and
// redoc.standalone.js, vendored from npm package redoc 2.5.4, which renders
// the API reference at /api/docs (api-docs.css styles that page).
package static

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
)

// FS holds the assets.
//
//go:embed *.css *.js
var FS embed.FS

// Prefix is where the assets are served.
const Prefix = "/static/"

// versions maps an asset's name to a short hash of its content. Assets are
// served with a year-long cache, so their URLs must change with their bytes.
var versions = func() map[string]string {
	m := map[string]string{}
	_ = fs.WalkDir(FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := FS.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		m[path] = hex.EncodeToString(sum[:6])
		return nil
	})
	return m
}()

// Version returns a short hash of an asset's content ("" when unknown).
func Version(name string) string { return versions[name] }

// URL returns the cache-busting URL of an asset, e.g. "/static/app.css?v=1a2b3c".
func URL(name string) string {
	if v, ok := versions[name]; ok {
		return Prefix + name + "?v=" + v
	}
	return Prefix + name
}
