ALTER TABLE pronto_progress DROP COLUMN checkpoint;
