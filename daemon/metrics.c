/* placeholder: daemon/metrics.c */
