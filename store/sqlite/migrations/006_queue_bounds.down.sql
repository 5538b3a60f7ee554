DROP TABLE IF EXISTS pronto_queue_bounds;
