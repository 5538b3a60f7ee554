DROP TABLE IF EXISTS pronto_cron;
