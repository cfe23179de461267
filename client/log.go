package client

import (
	"context"
	"log/slog"
)

// discardHandler drops every record: the default logger of a Client and a
// Worker. (slog.DiscardHandler arrived in Go 1.24; this module keeps a lower
// go line so that older programs can use it.)
type discardHandler struct{}

func (discardHandler) Enabled(context.Context, slog.Level) bool  { return false }
func (discardHandler) Handle(context.Context, slog.Record) error { return nil }
func (d discardHandler) WithAttrs([]slog.Attr) slog.Handler      { return d }
func (d discardHandler) WithGroup(string) slog.Handler           { return d }
