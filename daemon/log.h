/* placeholder: daemon/log.h */
