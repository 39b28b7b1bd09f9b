/* placeholder: proto/jsonview.c */
