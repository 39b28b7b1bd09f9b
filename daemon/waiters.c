/* placeholder: daemon/waiters.c */
