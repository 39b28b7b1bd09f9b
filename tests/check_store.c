/* placeholder: tests/check_store.c */
