/* placeholder: proto/doc.c */
