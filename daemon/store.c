/* placeholder: daemon/store.c */
