/* placeholder: daemon/log.c */
