/* placeholder: tests/daemon_util.h */
