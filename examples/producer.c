/* producer.c - an input pipeline for a device feed: pushes N batches into a feed and marks
 * it done (examples/README: with train_loop.c).
 *
 *   producer FEED_URL N [ROWS]
 *
 * Each batch is one F32 tensor "x" of shape [ROWS, 8] (ROWS default 32), filled with the
 * batch number, pushed to device queue 0 with Tfetch-Seq = its number (a retry after a
 * failure is then never enqueued twice), waiting up to 10 s for room when the queue is full.
 * The feed must be declared with that signature (tfetch feed declare). The batch is built in
 * one buffer (tf_doc_new_packed) and rewritten in place for each push: over UCX it then goes
 * in one piece, copied by a same-host daemon straight from that buffer. Uses only the public
 * libtfetch API; single-threaded.
 */
#include <stdio.h>
#include <stdlib.h>

#include <tfetch.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s FEED_URL N [ROWS]\n", argv[0]);
        return 1;
    }
    const char *url = argv[1];
    long n = atol(argv[2]), rows = argc > 3 ? atol(argv[3]) : 32;
    if (n < 0 || rows < 1) {
        fprintf(stderr, "bad N or ROWS\n");
        return 1;
    }
    tf_client_t *c = NULL;
    if (tf_client_new(&c) != TF_OK)
        return 1;
    int64_t shape[2] = {rows, 8};
    tf_tensor_spec_t spec = {"x", TF_F32, 2, shape};
    tf_doc_t *d = NULL;
    if (tf_doc_new_packed(&spec, 1, &d) != TF_OK) {
        fprintf(stderr, "producer: cannot build a batch of %ld rows\n", rows);
        tf_client_free(c);
        return 1;
    }
    float *x = tf_doc_writable(d, 0);
    int rc = 0;
    for (long i = 1; i <= n && rc == 0; i++) {
        for (long k = 0; k < rows * 8; k++)
            x[k] = (float)i;
        tf_status_t st = tf_infeed_push(c, url, 0, d, (uint64_t)i, 10000, NULL);
        if (st != TF_OK) {
            fprintf(stderr, "producer: push %ld: %s (%s)\n", i, tf_client_last(c)->error,
                    tf_err_name(st));
            rc = 1;
        }
    }
    if (rc == 0 && tf_feed_done(c, url) != TF_OK) {
        fprintf(stderr, "producer: done: %s\n", tf_client_last(c)->error);
        rc = 1;
    }
    if (rc == 0)
        printf("producer: pushed %ld batches\n", n);
    tf_doc_free(d);
    tf_client_free(c);
    return rc;
}
