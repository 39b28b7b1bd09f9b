/* placeholder: client/internal.h */
