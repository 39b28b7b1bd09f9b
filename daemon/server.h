/* placeholder: daemon/server.h */
