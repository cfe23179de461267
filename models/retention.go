package models

import (
	"context"
	"fmt"
	"time"
)

// Default lifetimes of the rows the maintenance pass expires.
const (
	// DefaultIdempotencyKeyTTL is how long a command's idempotency key and
	// first outcome are kept: a retry within it replays the outcome, a
	// "replay" after it is a new command.
	DefaultIdempotencyKeyTTL = 7 * 24 * time.Hour
	// DefaultRejectionRetention is how long the per-minute counters of
	// rejected writes (write_rejections, the state conflict rate) are kept.
	DefaultRejectionRetention = 30 * 24 * time.Hour
)

// RetentionPolicy is how long the maintenance pass keeps idempotency keys
// and rejection counters. Zero means the default; a negative value keeps
// the rows forever (that kind then adds nothing to the pass's probe).
type RetentionPolicy struct {
	IdempotencyKeys time.Duration
	Rejections      time.Duration
}

func (p RetentionPolicy) idempotencyKeys() time.Duration {
	if p.IdempotencyKeys == 0 {
		return DefaultIdempotencyKeyTTL
	}
	return p.IdempotencyKeys
}

func (p RetentionPolicy) rejections() time.Duration {
	if p.Rejections == 0 {
		return DefaultRejectionRetention
	}
	return p.Rejections
}

// retentionKind is a timer kind that deletes the rows of table whose time
// column is older than ttl, oldest first, at most limit per pass: its probe
// is min(column), an index seek (idempotency_keys_created_idx; the primary
// key of write_rejections starts with bucket), and it is due when that row
// is ttl old. keyCols name the row for the bounded DELETE.
func retentionKind(name, table, column, keyCols string, ttl func(*Store) time.Duration, count func(*MaintenanceReport) *int) timerKind {
	return timerKind{
		name: name,
		probes: func(s *Store) []timerProbe {
			if ttl(s) < 0 {
				return nil
			}
			return []timerProbe{{sql: `SELECT min(` + column + `) FROM ` + table}}
		},
		due: func(s *Store, vals []NullTime) (time.Time, bool) {
			if len(vals) == 0 || !vals[0].Valid {
				return time.Time{}, false
			}
			return vals[0].Time.Time.Add(ttl(s)), true
		},
		run: func(ctx context.Context, s *Store, limit int, r *MaintenanceReport) (int, error) {
			cutoff := NewUTCTime(s.now().Add(-ttl(s)))
			res := s.DB.WithContext(ctx).Exec(`DELETE FROM `+table+` WHERE (`+keyCols+`) IN (SELECT `+keyCols+` FROM `+table+
				` WHERE `+column+` <= ? ORDER BY `+column+` LIMIT ?)`, cutoff, limit)
			if res.Error != nil {
				return 0, fmt.Errorf("expire %s: %w", table, res.Error)
			}
			n := int(res.RowsAffected)
			*count(r) += n
			return n, nil
		},
	}
}

func retentionKinds() []timerKind {
	return []timerKind{
		retentionKind("idempotency_expiry", "idempotency_keys", "created_at", "scope, key",
			func(s *Store) time.Duration { return s.Retention.idempotencyKeys() },
			func(r *MaintenanceReport) *int { return &r.ExpiredKeys }),
		retentionKind("rejection_expiry", "write_rejections", "bucket", "bucket, reason, queue",
			func(s *Store) time.Duration { return s.Retention.rejections() },
			func(r *MaintenanceReport) *int { return &r.ExpiredRejections }),
	}
}
