/* placeholder: proto/jsonw.c */
