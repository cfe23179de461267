package models

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// poolTrace counts every statement, and the round trips they travel in,
// that anything in the store sends over its PostgreSQL pool: the write
// path's batches, GORM's reads and the dispatcher's statements alike. Tests
// pin what background work costs with it (PoolStats), as WireStats pins the
// write path. Two atomic adds per statement; no allocation.
type poolTrace struct {
	statements, roundTrips atomic.Int64
}

// TraceQueryStart counts a statement sent on its own: one round trip.
func (p *poolTrace) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	p.statements.Add(1)
	p.roundTrips.Add(1)
	return ctx
}

// TraceQueryEnd is part of pgx.QueryTracer.
func (p *poolTrace) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart counts a batch: one round trip for all its statements.
func (p *poolTrace) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	p.roundTrips.Add(1)
	return ctx
}

// TraceBatchQuery counts a statement of a batch.
func (p *poolTrace) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	p.statements.Add(1)
}

// TraceBatchEnd is part of pgx.BatchTracer.
func (p *poolTrace) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TraceCopyFromStart counts a COPY: one statement, one round trip.
func (p *poolTrace) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	p.statements.Add(1)
	p.roundTrips.Add(1)
	return ctx
}

// TraceCopyFromEnd is part of pgx.CopyFromTracer.
func (p *poolTrace) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// PoolStats returns the statements, and the round trips they travelled in,
// that the store has sent over its PostgreSQL pool so far, from every
// caller (zeros on SQLite). Statement preparation (pgx prepares a
// statement the first time a connection sees its text) is not counted: it
// depends on which connection the pool hands out, not on the caller.
func (s *Store) PoolStats() (statements, roundTrips int64) {
	if s.trace == nil {
		return 0, 0
	}
	return s.trace.statements.Load(), s.trace.roundTrips.Load()
}
