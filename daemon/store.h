/* placeholder: daemon/store.h */
