/* driver.c - libtfetch against a hostile server (tests/hostile/run.py): one tf_get of URL
 * under a transport policy, stall limit and body cap, and one line saying what came of it.
 *
 *   hostile-driver URL auto|http|ucx STALL_MS MAX_BODY
 *
 * A GET that succeeds is made once more: the first one upgrades (policy auto), the second
 * is the one that may take the same-host shm path the upgrade opened. Prints "TF_OK
 * transport=T fallback=F" or "TF_Exxx error=MESSAGE fallback=F" (of the last GET) and exits
 * 0 on success, 1 on a refusal; a signal or any other exit is the defect run.py looks for.
 * Public API only (client/tfetch.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tfetch.h"

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s URL auto|http|ucx STALL_MS MAX_BODY\n", argv[0]);
        return 2;
    }
    tf_client_t *c = NULL;
    if (tf_client_new(&c) != TF_OK)
        return 2;
    tf_transport_t t = strcmp(argv[2], "ucx") == 0 ? TF_TRANSPORT_UCX :
                       strcmp(argv[2], "http") == 0 ? TF_TRANSPORT_HTTP : TF_TRANSPORT_AUTO;
    if (tf_client_set_transport(c, t) != TF_OK ||
        tf_client_set_stall(c, 1024, atol(argv[3])) != TF_OK)
        return 2;
    if (strcmp(argv[4], "-") != 0)
        tf_client_set_max_body(c, strtoull(argv[4], NULL, 10));
    tf_doc_t *d = NULL;
    tf_status_t st = tf_get(c, argv[1], 0, &d);
    if (st == TF_OK) {
        tf_doc_free(d);
        d = NULL;
        st = tf_get(c, argv[1], 0, &d);
    }
    const tf_result_t *r = tf_client_last(c);
    if (st == TF_OK)
        printf("TF_OK transport=%s fallback=%s\n", r->transport, r->fallback);
    else
        printf("%s error=%s fallback=%s\n", tf_err_name(st), r->error, r->fallback);
    tf_doc_free(d);
    tf_client_free(c);
    return st == TF_OK ? 0 : 1;
}
