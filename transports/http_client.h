/* placeholder: transports/http_client.h */
