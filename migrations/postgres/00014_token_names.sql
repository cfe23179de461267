-- +goose Up
-- An API token's name is its actor in events and in the admin log
-- (token:<name>), so two tokens may not share one, revoked or not: the
-- history would no longer say which of them acted. Earlier releases allowed
-- duplicates. The oldest token of a name (by created_at, id) keeps it; every
-- later one is renamed to <name>-<its id>, which no other token can hold
-- since ids are unique, and each rename is recorded in the admin log so that
-- an operator can see why a token's actor changed. Such a token still
-- authenticates as before: only its name moved.
INSERT INTO admin_audit (id, actor, action, target_kind, target_id, before, after, created_at)
SELECT 'adm_m14_' || t.id, 'migration:00014', 'token.rename', 'token', t.id,
       '{"name":' || to_json(t.name)::text || '}',
       '{"name":' || to_json(t.name || '-' || t.id)::text || '}',
       now()
FROM api_tokens t
WHERE EXISTS (SELECT 1 FROM api_tokens o
              WHERE o.name = t.name AND (o.created_at, o.id) < (t.created_at, t.id));

UPDATE api_tokens t SET name = t.name || '-' || t.id
WHERE EXISTS (SELECT 1 FROM api_tokens o
              WHERE o.name = t.name AND (o.created_at, o.id) < (t.created_at, t.id));

CREATE UNIQUE INDEX api_tokens_name_key ON api_tokens (name);

-- +goose Down
-- Renamed tokens keep their new names: the old ones were ambiguous.
DROP INDEX api_tokens_name_key;
