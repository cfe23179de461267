-- +goose Up
-- The metric rollups also cover the hour still open, in 5-minute slices
-- (models/metrics_rollup.go), so that a request folds minutes of events
-- at its end instead of up to an hour of them. rolled_through is now the
-- end of everything rolled up, slices included; hours_through the end of
-- the hours rolled up whole (rolled_through - hours_through <= 1 hour). A
-- slice's rows sit in the same tables as an hour's, under the slice's
-- start; the hour's pass replaces them with the hour's own. Binaries
-- before this migration took rolled_through for an hour boundary, and now
-- refuse the schema as newer than they know.
ALTER TABLE metric_rollup_state ADD COLUMN hours_through timestamptz;
UPDATE metric_rollup_state SET hours_through = rolled_through;
ALTER TABLE metric_rollup_state ALTER COLUMN hours_through SET NOT NULL;

-- +goose Down
-- Without the slices, rolled_through is the end of the whole hours again;
-- the slices' rows go (the next pass rolls their hour up whole).
DELETE FROM metric_rollups WHERE bucket >= (SELECT hours_through FROM metric_rollup_state);
DELETE FROM metric_session_hours WHERE bucket >= (SELECT hours_through FROM metric_rollup_state);
DELETE FROM metric_session_firsts WHERE bucket >= (SELECT hours_through FROM metric_rollup_state);
UPDATE metric_rollup_state SET rolled_through = hours_through;
ALTER TABLE metric_rollup_state DROP COLUMN hours_through;
