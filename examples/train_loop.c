/* train_loop.c - a "training loop" fed by a device feed: one launch runs up to STEPS steps,
 * each taking the next batch from the infeed, computing a loss and pushing it to the
 * outfeed, until the feed is done (examples/README: with producer.c).
 *
 *   train_loop FEED_URL STEPS [BACKEND [DEVICE]]
 *
 * BACKEND is host (default), sim or cuda (falls back to host without a device). The batch
 * after the current one is already being fetched while a step computes (prefetch 2), and a
 * batch is released (acknowledged) only once its step pushed its loss, so a loop that dies
 * mid-step gets that batch again when it restarts with the same consumer id. Prints, per
 * launch, the steps run and the last loss, then what carried the last pop (http, ucx/...). Exit 0 when the feed ended or STEPS ran.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tfetch.h>

/* The step: the mean of x, read from host memory (the host and sim backends; with cuda this
 * is where a kernel would run on the device pointers). */
static float step(const tf_doc_t *batch)
{
    const tf_tensor_t *t = tf_doc_find(batch, "x");
    if (!t || t->dtype != TF_F32 || t->nbytes == 0)
        return -1.0f;
    const float *x = t->data;
    size_t n = t->nbytes / sizeof(float);
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += x[i];
    return (float)(s / (double)n);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s FEED_URL STEPS [BACKEND [DEVICE]]\n", argv[0]);
        return 1;
    }
    const char *url = argv[1], *backend = argc > 3 ? argv[3] : "host";
    const char *device = argc > 4 ? argv[4] : "0";
    long steps = atol(argv[2]);
    tf_client_t *c = NULL;
    tf_feed_t *feed = NULL;
    if (tf_client_new(&c) != TF_OK)
        return 1;
    tf_feed_opts_t o = TF_FEED_OPTS_INIT;
    o.prefetch = 2;
    o.consumer = "train-loop";
    o.flags = TF_FEED_FALLBACK_HOST;
    tf_status_t st = tf_feed_attach_opts(c, url, device, backend, &o, &feed);
    if (st != TF_OK) {
        fprintf(stderr, "train_loop: attach: %s (%s)\n", tf_client_last(c)->error,
                tf_err_name(st));
        tf_client_free(c);
        return 1;
    }
    int device_memory = strcmp(tf_feed_backend(feed), "cuda") == 0;
    long done = 0;
    float loss = 0;
    int rc = 0;
    while (done < steps) {
        tf_item_t *it = NULL;
        st = tf_infeed_pop(feed, 30000, &it);
        if (st == TF_EDONE)
            break;                      /* every replica stops here, together */
        if (st != TF_OK) {
            fprintf(stderr, "train_loop: pop: %s (%s)\n", tf_client_last(c)->error,
                    tf_err_name(st));
            rc = 1;
            break;
        }
        loss = device_memory ? (float)tf_item_seq(it) : step(tf_item_doc(it));
        int64_t shape[1] = {1};
        float l = loss;
        tf_doc_t *out = tf_doc_new();
        char s[32];
        snprintf(s, sizeof(s), "%llu", (unsigned long long)tf_item_seq(it));
        if (!out || tf_doc_add(out, "loss", TF_F32, 1, shape, &l, sizeof(l), TF_COPY) != TF_OK ||
            tf_doc_set_meta(out, "step", s) != TF_OK ||
            (st = tf_outfeed_push(feed, out, NULL)) != TF_OK) {
            fprintf(stderr, "train_loop: outfeed: %s\n", tf_client_last(c)->error);
            rc = 1;
        }
        tf_doc_free(out);
        if (rc)
            break;
        tf_item_release(it);            /* the step is done: acknowledged on the next pop */
        done++;
    }
    printf("train_loop: backend=%s steps=%ld last_loss=%g\n", tf_feed_backend(feed), done,
           (double)loss);
    printf("train_loop: transport=%s\n", tf_feed_transport(feed));   /* the last pop's */
    tf_feed_detach(feed);
    tf_client_free(c);
    return rc;
}
