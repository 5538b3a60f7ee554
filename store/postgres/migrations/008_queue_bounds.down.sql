DROP TABLE IF EXISTS queue_bounds;
