DROP TABLE IF EXISTS pronto_leaders;
DROP TABLE IF EXISTS pronto_queues;
DROP TABLE IF EXISTS pronto_jobs;
