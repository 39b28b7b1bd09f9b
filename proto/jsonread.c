/* placeholder: proto/jsonread.c */
