-- Back to migration 017: no hand-off.
DROP TABLE IF EXISTS waiters;
