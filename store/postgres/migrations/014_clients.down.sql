DROP TABLE {schema}.clients;
