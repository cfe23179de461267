-- +goose Up
-- The "Stalled" views (the inbox tab and the sessions list's ?stalled=1)
-- list stalled sessions newest first, like every listing. The stalled index
-- of 00012 is keyed by (next_step, queue) for the gauges' GROUP BY, so a
-- listing over it had to read and sort every stalled session. This partial
-- index holds the same rows (open sessions waiting on a step) in listing
-- order, so a page stops after its rows whatever the backlog.
CREATE INDEX sessions_waiting_step_updated_idx ON sessions (updated_at, id)
    WHERE status = 'open' AND next_step <> '';

-- +goose Down
DROP INDEX sessions_waiting_step_updated_idx;
