/* placeholder: proto/raw.c */
