/* placeholder: daemon/config.c */
