/* placeholder: proto/dtype.c */
