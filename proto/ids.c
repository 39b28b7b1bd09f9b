/* placeholder: proto/ids.c */
