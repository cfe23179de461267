-- +goose Up
-- The "Stalled" views (the inbox tab and the sessions list's ?stalled=1)
-- list stalled sessions newest first, like every listing. The stalled index
-- of 00012 is keyed by (next_step, queue) for the gauges' GROUP BY, so a
-- listing over it had to read and sort every stalled session. This partial
-- index holds the same rows (open sessions waiting on a step) in listing
-- order, so a page stops after its rows whatever the backlog.
CREATE INDEX sessions_waiting_step_updated_idx ON sessions (updated_at, id)
    WHERE status = 'open' AND next_step <> '';
-- Open sessions are the ones with a next_step: without these statistics the
-- planner multiplies the two selectivities, expects a handful of stalled
-- sessions where there are thousands, and sorts them all instead of reading
-- the index above in order.
CREATE STATISTICS sessions_status_next_step_stats (dependencies, mcv) ON status, next_step FROM sessions;

-- +goose Down
DROP STATISTICS sessions_status_next_step_stats;
DROP INDEX sessions_waiting_step_updated_idx;
