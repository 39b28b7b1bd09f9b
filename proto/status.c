/* placeholder: proto/status.c */
