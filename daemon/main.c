/* placeholder: daemon/main.c */
