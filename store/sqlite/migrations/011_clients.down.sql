DROP TABLE pronto_clients;
