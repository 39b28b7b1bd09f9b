/* placeholder: tests/check_proto.c */
