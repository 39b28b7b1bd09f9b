/* feed_host.c - the host backend of a feed (feed.h): items stay where they were received,
 * in host memory, and the caller's outfeed documents are sent from where they are. No
 * copies, no state; every copy is complete as soon as it starts. Called on the thread
 * driving the client.
 */
#include "config.h"

#include "client/feed.h"

static tf_status_t host_open(const tfi_feed_env_t *env, void **state, char *why, size_t n)
{
    *state = NULL;
    return TF_OK;
}

static void host_close(void *state)
{
}

static tf_status_t host_in_start(void *state, tfi_copy_t *x)
{
    x->dev = NULL;                      /* the caller reads x->host */
    return TF_OK;
}

static tf_status_t host_out_start(void *state, tfi_copy_t *x)
{
    x->host = NULL;                     /* the caller's document is sent as it is */
    return TF_OK;
}

static int host_ready(void *state, tfi_copy_t *x)
{
    return 1;
}

static void host_release(void *state, tfi_copy_t *x)
{
}

const tfi_feed_backend_t tfi_feed_host = {
    .name = "host",
    .device_memory = 0,
    .open = host_open,
    .close = host_close,
    .in_start = host_in_start,
    .out_start = host_out_start,
    .ready = host_ready,
    .release = host_release,
};
