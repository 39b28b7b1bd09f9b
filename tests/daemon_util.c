/* placeholder: tests/daemon_util.c */
