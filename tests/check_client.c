/* placeholder: tests/check_client.c */
