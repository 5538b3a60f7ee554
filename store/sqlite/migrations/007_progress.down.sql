DROP TABLE IF EXISTS pronto_progress;
