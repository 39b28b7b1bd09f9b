/* feeds.c - the tfetch command's feed subcommands: declare, push, pop, outfeed, done and
 * stats, each a single blocking call of libtfetch's feed API, and the checks of their
 * arguments and options.
 *
 * Single-threaded.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* ---- feed: declare, push, pop, outfeed, done, stats ------------------------------------------ */

static int feed_declare(tf_client_t *c, const char *url, const char *path)
{
    cli_input_t in = {0};
    const char *shown = path && strcmp(path, "-") ? path : "stdin";
    if (cli_input_load(path, &in) != 0) {
        cli_msg("cannot read %s: %s", shown, strerror(errno));
        return EXIT_LOCAL;
    }
    char *json = strndup(in.data ? in.data : "", in.len);
    cli_input_release(&in);
    if (!json) {
        cli_msg("out of memory");
        return EXIT_LOCAL;
    }
    char *stats = NULL;
    tf_status_t st = tf_feed_declare(c, url, json, &stats);
    free(json);
    if (st != TF_OK)
        return cli_request_failed(tf_client_last(c), "feed declare", url, st);
    return cli_print_json(stats);
}

static int feed_push(tf_client_t *c, const cli_opts_t *o, const char *url, const char *path)
{
    cli_input_t in = {0};
    tf_doc_t *doc = NULL;
    int rc = cli_load_doc(o, url, path, &in, &doc);
    if (rc != EXIT_OK)
        return rc;
    int dev = -1;
    long d;
    if (o->device && (cli_parse_ms(o->device, &d) != 0 || d > 63)) {
        rc = cli_usage_error("feed push: --device takes an index (0..63)");
        goto out;
    }
    if (o->device)
        dev = (int)d;
    uint64_t round = 0;
    tf_status_t st = tf_infeed_push(c, url, dev, doc, o->seq, o->wait_ms, &round);
    if (st != TF_OK)
        rc = cli_request_failed(tf_client_last(c), "feed push", url, st);
    else if (!o->quiet)
        fprintf(stderr, "round=%" PRIu64 "\n", round);
out:
    tf_doc_free(doc);
    cli_input_release(&in);
    return rc;
}

static int feed_pop(tf_client_t *c, const cli_opts_t *o, const char *url, const char *path)
{
    tf_feed_opts_t fo = TF_FEED_OPTS_INIT;
    fo.flags = TF_FEED_NO_PREFETCH;    /* one item: nothing else delivered to us */
    fo.consumer = o->consumer ? o->consumer : "tfetch";
    tf_feed_t *feed = NULL;
    tf_status_t st = tf_feed_attach_opts(c, url, o->device ? o->device : "0", "host", &fo, &feed);
    if (st != TF_OK)
        return cli_request_failed(tf_client_last(c), "feed pop", url, st);
    tf_item_t *it = NULL;
    int rc;
    st = tf_infeed_pop(feed, o->wait_ms, &it);
    if (st == TF_EAGAIN) {
        cli_msg("feed pop %s: nothing within %ld ms", url, o->wait_ms);
        rc = EXIT_NOTFOUND;
    } else if (st == TF_EDONE) {
        cli_msg("feed pop %s: the feed is done (TF_EDONE)", url);
        rc = EXIT_REJECTED;
    } else if (st != TF_OK) {
        rc = cli_request_failed(tf_client_last(c), "feed pop", url, st);
    } else {
        if (!o->quiet)
            fprintf(stderr, "position=%" PRIu64 " seq=%" PRIu64 " round=%" PRIu64
                    " generation=%" PRIu64 "\n", tf_item_position(it), tf_item_seq(it),
                    tf_item_round(it), tf_item_generation(it));
        rc = cli_write_reply(o, "feed pop", url, tf_item_doc(it), path);
        /* Acknowledged only once written: a failed write leaves it to the next consumer. */
        if (rc == EXIT_OK)
            tf_item_release(it);
    }
    tf_feed_detach(feed);
    return rc;
}

static int feed_outfeed(tf_client_t *c, const cli_opts_t *o, const char *url, const char *path)
{
    tf_doc_t *doc = NULL;
    uint64_t seq = 0;
    int dev = -1;
    tf_status_t st = tf_outfeed_get(c, url, o->after, o->wait_ms, &doc, &seq, &dev);
    if (st == TF_EAGAIN) {
        cli_msg("feed outfeed %s: nothing after %" PRIu64 " within %ld ms", url, o->after,
                o->wait_ms);
        return EXIT_NOTFOUND;
    }
    if (st == TF_EGONE) {
        cli_msg("feed outfeed %s: item %" PRIu64 " is no longer kept; resume after %" PRIu64, url,
                o->after + 1, seq);
        return EXIT_REJECTED;
    }
    if (st != TF_OK)
        return cli_request_failed(tf_client_last(c), "feed outfeed", url, st);
    if (!o->quiet)
        fprintf(stderr, "seq=%" PRIu64 " device=%d\n", seq, dev);
    int rc = cli_write_reply(o, "feed outfeed", url, doc, path);
    tf_doc_free(doc);
    return rc;
}

int cli_cmd_feed(tf_client_t *c, const cli_opts_t *o, char **args, int nargs)
{
    const char *sub = args[0], *url = args[1], *file = nargs > 2 ? args[2] : NULL;
    tf_status_t st;
    char *json = NULL;
    if (cli_is(sub, "declare"))
        return feed_declare(c, url, file);
    if (cli_is(sub, "push"))
        return feed_push(c, o, url, file);
    if (cli_is(sub, "pop"))
        return feed_pop(c, o, url, file);
    if (cli_is(sub, "outfeed"))
        return feed_outfeed(c, o, url, file);
    if (cli_is(sub, "done")) {
        st = tf_feed_done(c, url);
        return st == TF_OK ? EXIT_OK : cli_request_failed(tf_client_last(c), "feed done", url, st);
    }
    st = tf_feed_stats(c, url, &json);
    if (st != TF_OK)
        return cli_request_failed(tf_client_last(c), "feed stats", url, st);
    return cli_print_json(json);
}

/* The feed subcommand's arguments and the options that apply to it. */
int cli_check_feed(char **args, int nargs, const cli_opts_t *o)
{
    static const char *const subs[] = {"declare", "push", "pop", "outfeed", "done", "stats"};
    int known = 0;
    if (nargs < 1)
        return cli_usage_error("feed needs a subcommand (declare, push, pop, outfeed, done, "
                               "stats)");
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
        known |= cli_is(args[0], subs[i]);
    if (!known)
        return cli_usage_error("unknown feed subcommand '%s'", args[0]);
    const char *sub = args[0];
    int takes_file = !cli_is(sub, "done") && !cli_is(sub, "stats");
    if (nargs < 2)
        return cli_usage_error("feed %s needs a feed URL", sub);
    if (nargs > (takes_file ? 3 : 2))
        return cli_usage_error("too many arguments for feed %s", sub);
    if (o->device && !cli_is(sub, "push") && !cli_is(sub, "pop"))
        return cli_usage_error("--device applies to feed push and feed pop only");
    if (o->seq && !cli_is(sub, "push"))
        return cli_usage_error("--seq applies to feed push only");
    if (o->after && !cli_is(sub, "outfeed"))
        return cli_usage_error("--after applies to feed outfeed only");
    if (o->consumer && !cli_is(sub, "pop"))
        return cli_usage_error("--consumer applies to feed pop only");
    if (o->wait_ms > 0 && !cli_is(sub, "push") && !cli_is(sub, "pop") && !cli_is(sub, "outfeed"))
        return cli_usage_error("--wait applies to get and feed push, pop and outfeed only");
    if (o->raw && !cli_is(sub, "pop") && !cli_is(sub, "outfeed"))
        return cli_usage_error("--raw applies to get, call, feed pop and feed outfeed only");
    if (o->dtype || o->shape || o->dir || o->parallel || o->json || o->format)
        return cli_usage_error("feed takes none of --dtype, --shape, --dir, --parallel, --json, "
                               "--format");
    return -1;
}
