/* placeholder: daemon/server.c */
