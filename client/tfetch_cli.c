/* placeholder: client/tfetch_cli.c */
