/* placeholder: transports/http_client.c */
