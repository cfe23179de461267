-- pgbench-lifecycle.sql: the database work of one TaskPilots lifecycle
-- (create session → delegate → lease → completed result) as four commits,
-- with the statements our write path sends, minus everything that is ours
-- on top (row locks, idempotency records, the event hash chain, JSON
-- encoding, HTTP). It is the ceiling the product is compared against.
--
-- Run with the extended protocol (-M prepared): :variables become bind
-- parameters (so a colon followed by a letter or digit must not appear
-- inside the JSON literals below). pgbench counts one run of this whole script as one
-- "transaction", so its tps here is lifecycles per second (four commits
-- each). Each client works its own queue (bench-pg-<client_id>), so every
-- claim finds the delegation the client just queued.
--
-- The schema is our own: create it with `taskpilots migrate up` first. The
-- state has a table of its own (session_states, migration 00020), written
-- with the session row as the write path does.

\set n random(1, 9000000000000000000)

-- 1. session.created: insert the session, its state and its first event.
BEGIN;
INSERT INTO sessions (id, parent_id, ticket_ref, goal, status, priority, state_version, last_seq, current_step, queue, assignee, last_hash, escalated_at, created_at, updated_at)
VALUES ('ses_' || CAST(:n AS text), NULL, 'T-100001', 'Refund order 100001 if eligible', 'open', 3, 1, 1, '', '', '',
  'f1c3a9d0b2e4f6a8c0e2d4b6a8f0c2e4d6b8a0f2c4e6d8b0a2f4c6e8d0b2a4f6', NULL, now(), now());
INSERT INTO session_states (session_id, state)
VALUES ('ses_' || CAST(:n AS text),
  '{"constraints":["refunds over 200 EUR need a human","never refund twice"],"done_criteria":["refund issued or denial explained"],"facts":{"customer":"c-4411","order_total":"120 EUR"},"goal":"Refund order 100001 if eligible","priority": 3,"resources":[{"name":"orders-db","uri":"db://orders"},{"name":"payments-api","uri":"https://payments.internal"}],"session_id":"ses_01KB0000000000000000000000","status":"open","ticket_ref":"T-100001","version": 1}');
INSERT INTO events (id, session_id, seq, type, actor, version_before, version_after, payload, idempotency_key, prev_hash, hash, created_at)
VALUES ('evt_' || CAST(:n AS text) || '_1', 'ses_' || CAST(:n AS text), 1, 'session.created', 'token:' || 'bench-controller', 0, 1,
  '{"constraints":["refunds over 200 EUR need a human","never refund twice"],"done_criteria":["refund issued or denial explained"],"facts":{"customer":"c-4411","order_total":"120 EUR"},"goal":"Refund order 100001 if eligible","priority": 3,"resources":[{"name":"orders-db","uri":"db://orders"},{"name":"payments-api","uri":"https://payments.internal"}],"ticket_ref":"T-100001"}',
  'idk_' || CAST(:n AS text) || '_1', '', 'f1c3a9d0b2e4f6a8c0e2d4b6a8f0c2e4d6b8a0f2c4e6d8b0a2f4c6e8d0b2a4f6', now());
COMMIT;

-- 2. delegation.created: update the session, append the event, queue the delegation.
BEGIN;
UPDATE sessions SET status = 'queued', state_version = 2, last_seq = 2, current_step = 'check-eligibility', queue = 'bench-pg-' || CAST(:client_id AS text),
  last_hash = 'a2f4c6e8d0b2a4f6f1c3a9d0b2e4f6a8c0e2d4b6a8f0c2e4d6b8a0f2c4e6d8b0', updated_at = now()
WHERE id = 'ses_' || CAST(:n AS text) AND state_version = 1;
UPDATE session_states SET state = '{"constraints":["refunds over 200 EUR need a human","never refund twice"],"current_step":"check-eligibility","delegation":{"attempt": 1,"id":"dlg_01KB0000000000000000000000","instructions":"Check the order against the refund policy.","lease_seconds": 30,"max_attempts": 3,"queue":"bench","step":"check-eligibility"},"done_criteria":["refund issued or denial explained"],"facts":{"customer":"c-4411","order_total":"120 EUR"},"goal":"Refund order 100001 if eligible","priority": 3,"resources":[{"name":"orders-db","uri":"db://orders"},{"name":"payments-api","uri":"https://payments.internal"}],"session_id":"ses_01KB0000000000000000000000","status":"queued","ticket_ref":"T-100001","version": 2}'
WHERE session_id = 'ses_' || CAST(:n AS text);
INSERT INTO events (id, session_id, seq, type, actor, version_before, version_after, payload, idempotency_key, prev_hash, hash, created_at)
VALUES ('evt_' || CAST(:n AS text) || '_2', 'ses_' || CAST(:n AS text), 2, 'delegation.created', 'token:' || 'bench-controller', 1, 2,
  '{"delegation_id":"dlg_01KB0000000000000000000000","instructions":"Check the order against the refund policy.","lease_seconds": 30,"max_attempts": 3,"queue":"bench","step":"check-eligibility"}',
  'idk_' || CAST(:n AS text) || '_2', 'f1c3a9d0b2e4f6a8c0e2d4b6a8f0c2e4d6b8a0f2c4e6d8b0a2f4c6e8d0b2a4f6', 'a2f4c6e8d0b2a4f6f1c3a9d0b2e4f6a8c0e2d4b6a8f0c2e4d6b8a0f2c4e6d8b0', now());
INSERT INTO delegations (id, session_id, queue, step, instructions, status, priority, attempt, max_attempts, lease_seconds, lease_token, leased_by, lease_expires_at, available_at, created_at, updated_at)
VALUES ('dlg_' || CAST(:n AS text), 'ses_' || CAST(:n AS text), 'bench-pg-' || CAST(:client_id AS text), 'check-eligibility', 'Check the order against the refund policy.', 'queued', 3, 1, 3, 30, NULL, '', NULL, now(), now(), now());
COMMIT;

-- 3. delegation.leased: the one-statement claim, the event, the session.
BEGIN;
WITH next AS (
  SELECT id FROM delegations
  WHERE queue = 'bench-pg-' || CAST(:client_id AS text) AND status = 'queued' AND available_at <= now()
  ORDER BY priority, available_at, id
  LIMIT 1
  FOR UPDATE SKIP LOCKED
)
UPDATE delegations AS d
SET status = 'leased', lease_token = 'lt_' || CAST(:n AS text), leased_by = 'bench-w', updated_at = now(),
    lease_expires_at = now() + make_interval(secs => d.lease_seconds)
FROM next WHERE d.id = next.id
RETURNING d.id AS did, d.session_id AS sid, d.step AS step, d.attempt AS attempt
\gset
INSERT INTO events (id, session_id, seq, type, actor, version_before, version_after, payload, idempotency_key, prev_hash, hash, created_at)
VALUES ('evt_' || CAST(:n AS text) || '_3', :sid, 3, 'delegation.leased', 'token:' || 'bench-worker', 2, 3,
  '{"attempt": 1,"delegation_id":"dlg_01KB0000000000000000000000","worker":"bench-w1"}',
  'idk_' || CAST(:n AS text) || '_3', 'a2f4c6e8d0b2a4f6f1c3a9d0b2e4f6a8c0e2d4b6a8f0c2e4d6b8a0f2c4e6d8b0', 'c4e6d8b0a2f4c6e8d0b2a4f6f1c3a9d0b2e4f6a8c0e2d4b6a8f0c2e4d6b8a0f2', now());
UPDATE sessions SET status = 'running', state_version = 3, last_seq = 3,
  last_hash = 'c4e6d8b0a2f4c6e8d0b2a4f6f1c3a9d0b2e4f6a8c0e2d4b6a8f0c2e4d6b8a0f2', updated_at = now()
WHERE id = :sid AND state_version = 2;
UPDATE session_states SET state = '{"constraints":["refunds over 200 EUR need a human","never refund twice"],"current_step":"check-eligibility","delegation":{"attempt": 1,"id":"dlg_01KB0000000000000000000000","instructions":"Check the order against the refund policy.","lease_seconds": 30,"max_attempts": 3,"queue":"bench","step":"check-eligibility","worker":"bench-w1"},"done_criteria":["refund issued or denial explained"],"facts":{"customer":"c-4411","order_total":"120 EUR"},"goal":"Refund order 100001 if eligible","priority": 3,"resources":[{"name":"orders-db","uri":"db://orders"},{"name":"payments-api","uri":"https://payments.internal"}],"session_id":"ses_01KB0000000000000000000000","status":"running","ticket_ref":"T-100001","version": 3}'
WHERE session_id = :sid;
COMMIT;

-- 4. result.completed: fence on the lease, the event, the session.
BEGIN;
UPDATE delegations SET status = 'done', lease_token = NULL, lease_expires_at = NULL, updated_at = now()
WHERE id = :did AND lease_token = 'lt_' || CAST(:n AS text);
INSERT INTO events (id, session_id, seq, type, actor, version_before, version_after, payload, idempotency_key, prev_hash, hash, created_at)
VALUES ('evt_' || CAST(:n AS text) || '_4', :sid, 4, 'result.completed', 'token:' || 'bench-worker', 3, 4,
  '{"attempt": 1,"delegation_id":"dlg_01KB0000000000000000000000","evidence":[{"claim":"order paid 2026-11-20","source":"orders-db/1182"}],"output":{"eligible": true},"result_type":"completed","step":"check-eligibility"}',
  'idk_' || CAST(:n AS text) || '_4', 'c4e6d8b0a2f4c6e8d0b2a4f6f1c3a9d0b2e4f6a8c0e2d4b6a8f0c2e4d6b8a0f2', 'd0b2a4f6f1c3a9d0b2e4f6a8c0e2d4b6a8f0c2e4d6b8a0f2c4e6d8b0a2f4c6e8', now());
UPDATE sessions SET status = 'completed', state_version = 4, last_seq = 4, current_step = '', queue = '',
  last_hash = 'd0b2a4f6f1c3a9d0b2e4f6a8c0e2d4b6a8f0c2e4d6b8a0f2c4e6d8b0a2f4c6e8', updated_at = now()
WHERE id = :sid AND state_version = 3;
UPDATE session_states SET state = '{"completed_steps":[{"at_version": 4,"attempt": 1,"by":"token:' || 'bench-worker","delegation_id":"dlg_01KB0000000000000000000000","output":{"eligible": true},"result_type":"completed","step":"check-eligibility"}],"constraints":["refunds over 200 EUR need a human","never refund twice"],"done_criteria":["refund issued or denial explained"],"evidence":[{"claim":"order paid 2026-11-20","source":"orders-db/1182"}],"facts":{"customer":"c-4411","order_total":"120 EUR"},"goal":"Refund order 100001 if eligible","priority": 3,"resources":[{"name":"orders-db","uri":"db://orders"},{"name":"payments-api","uri":"https://payments.internal"}],"session_id":"ses_01KB0000000000000000000000","status":"completed","ticket_ref":"T-100001","version": 4}'
WHERE session_id = :sid;
COMMIT;
