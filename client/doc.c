/* placeholder: client/doc.c */
