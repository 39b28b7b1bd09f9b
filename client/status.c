/* placeholder: client/status.c */
