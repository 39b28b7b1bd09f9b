/* placeholder: daemon/waiters.h */
