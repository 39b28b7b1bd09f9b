/* placeholder: client/client.c */
