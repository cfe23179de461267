package models

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// DefaultPoolSize is the PostgreSQL pool size of a process when none is
// configured and the server has room for it.
const DefaultPoolSize = 20

// poolHeadroom is the server connections a derived pool leaves free for
// administration (psql, backups, monitoring) on top of the reserved ones.
const poolHeadroom = 5

// ServerConns is what a PostgreSQL server allows in connections.
type ServerConns struct {
	MaxConnections int // max_connections
	Reserved       int // superuser_reserved_connections
}

// Available is the number of connections ordinary roles may open.
func (c ServerConns) Available() int { return c.MaxConnections - c.Reserved }

func (c ServerConns) String() string {
	return fmt.Sprintf("%d (max_connections %d − superuser_reserved_connections %d)", c.Available(), c.MaxConnections, c.Reserved)
}

// PoolFitError says that the configured pools of all replicas cannot fit
// in the server's connections. Each process also holds one connection for
// LISTEN, which is counted.
type PoolFitError struct {
	Pool, Replicas int
	Server         ServerConns
}

func (e *PoolFitError) Error() string {
	need := (e.Pool + 1) * e.Replicas
	return fmt.Sprintf("database pool of %d connections × %d replica(s), plus one listener each, needs %d connections; "+
		"the server allows %s: lower the pool size (--db-max-conns) or the replica count (--replicas), or raise max_connections",
		e.Pool, e.Replicas, need, e.Server)
}

// FitPool returns the pool size of one process among replicas: requested
// when set (an error when the replicas' pools cannot fit in the server's
// connections), otherwise want (DefaultPoolSize when 0) lowered to the
// process's share of the server's connections minus a small headroom.
func FitPool(server ServerConns, replicas, requested, want int) (int, error) {
	replicas = max(replicas, 1)
	if requested > 0 {
		if (requested+1)*replicas > server.Available() {
			return 0, &PoolFitError{Pool: requested, Replicas: replicas, Server: server}
		}
		return requested, nil
	}
	if want <= 0 {
		want = DefaultPoolSize
	}
	share := (server.Available()-poolHeadroom)/replicas - 1 // one for the listener
	if share < 2 {
		return 0, &PoolFitError{Pool: 2, Replicas: replicas, Server: server}
	}
	return min(want, share), nil
}

// readServerConns reads the connection limits of the server at dsn over
// one short-lived connection.
func readServerConns(ctx context.Context, cfg *pgx.ConnConfig) (ServerConns, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return ServerConns{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var c ServerConns
	err = conn.QueryRow(ctx, `SELECT current_setting('max_connections')::int, current_setting('superuser_reserved_connections')::int`).
		Scan(&c.MaxConnections, &c.Reserved)
	if err != nil {
		return ServerConns{}, fmt.Errorf("read max_connections: %w", err)
	}
	return c, nil
}

// PoolSize is the size of the PostgreSQL pool (1 on SQLite: one connection).
func (s *Store) PoolSize() int {
	if s.pool == nil {
		return 1
	}
	return int(s.pool.Config().MaxConns)
}
