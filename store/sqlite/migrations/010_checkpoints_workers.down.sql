ALTER TABLE pronto_progress DROP COLUMN checkpoint;
DROP TABLE IF EXISTS pronto_workers;
DROP TABLE IF EXISTS pronto_settings;
