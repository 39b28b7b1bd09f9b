/* placeholder: bench/tfetch_bench.c */
