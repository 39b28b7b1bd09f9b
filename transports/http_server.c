/* placeholder: transports/http_server.c */
