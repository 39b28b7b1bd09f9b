/* placeholder: daemon/metrics.h */
