DROP TABLE IF EXISTS pronto_schemas;
