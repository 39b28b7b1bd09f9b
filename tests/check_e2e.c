/* placeholder: tests/check_e2e.c */
