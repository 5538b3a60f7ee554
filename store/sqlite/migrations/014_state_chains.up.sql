-- Cheaper state changes (docs/benchmarks.md, "SQLite drain: the jobs table's IN lists"). SQLite evaluates
-- `state IN (three or more constants)` in a CHECK constraint or a partial index's condition by filling
-- a temporary B-tree with the list, for every row an UPDATE writes: a claim or a finish of a plain
-- job filled three of them (the state CHECK's eight entries, the claim index's three for the old row
-- and three for the new). The same conditions written as chains of = comparisons cost a few opcodes.

-- The state CHECK, rewritten in place as the equivalent chain. SQLite documents this edit of
-- sqlite_schema for removing a CHECK without rebuilding the table; the chain accepts exactly the
-- values the list did, so every stored row satisfies it. (A rebuild would drop pronto_jobs, and with
-- foreign keys on that deletes the rows of pronto_progress.) RESET reloads the schema, so this
-- connection's next statements use the new text too; the index rebuilt below changes the schema
-- version, so other connections reload it as well. A table whose text differs (not written by
-- migration 001) is left as it is.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema SET sql = replace(sql, 'CHECK (state IN (''scheduled'', ''available'', ''pending'', ''active'',
                                                       ''completed'', ''retryable'', ''cancelled'', ''discarded''))',
    'CHECK (state = ''scheduled'' OR state = ''available'' OR state = ''pending'' OR state = ''active'' OR state = ''completed'' OR state = ''retryable'' OR state = ''cancelled'' OR state = ''discarded'')')
WHERE type = 'table' AND name = 'pronto_jobs';
PRAGMA writable_schema = RESET;

-- The claim index's condition as a chain too. Statements that use it spell the same chain
-- (claimableStatesSQL in queries.go): SQLite uses a partial index only for a query that repeats its
-- condition's terms.
DROP INDEX pronto_jobs_claim;
CREATE INDEX pronto_jobs_claim ON pronto_jobs (queue, priority DESC, scheduled_at, id)
    WHERE (state = 'available' OR state = 'scheduled' OR state = 'retryable') AND held IS NULL;
