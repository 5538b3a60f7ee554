-- Back to migration 003's claim index and migration 001's state CHECK.
DROP INDEX pronto_jobs_claim;
CREATE INDEX pronto_jobs_claim ON pronto_jobs (queue, priority DESC, scheduled_at, id)
    WHERE state IN ('available', 'scheduled', 'retryable') AND held IS NULL;

PRAGMA writable_schema = ON;
UPDATE sqlite_schema SET sql = replace(sql, 'CHECK (state = ''scheduled'' OR state = ''available'' OR state = ''pending'' OR state = ''active'' OR state = ''completed'' OR state = ''retryable'' OR state = ''cancelled'' OR state = ''discarded'')',
    'CHECK (state IN (''scheduled'', ''available'', ''pending'', ''active'',
                                                       ''completed'', ''retryable'', ''cancelled'', ''discarded''))')
WHERE type = 'table' AND name = 'pronto_jobs';
PRAGMA writable_schema = RESET;
