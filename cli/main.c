/* main.c - the tfetch command: get, put, call, rm, ls, info and feed (declare, push, pop,
 * outfeed, done, stats) against a tfetchd, from a shell.
 *
 * Uses only the public libtfetch API (client/tfetch.h), like curl's tool over libcurl. This
 * file is the tool's life: the usage text, the messages and exit codes, the checks of a
 * command's arguments, and the dispatch to commands.c (get, put, call, rm as a batch of
 * jobs over the asynchronous API; ls, info) and feeds.c. It owns one client for the life
 * of the process. Single-threaded. Exit codes are part of the interface (see usage and
 * tfetch(1)): 0 ok, 1 usage or invalid input, 2 not found, 3 rejected by the server (4xx),
 * 4 server or protocol error, 5 connection/timeout/transfer error, 6 local I/O error; with
 * several requests, the code of the first one (in argument order) that failed.
 */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/doctor.h"

/* ---- usage, messages and exit codes ------------------------------------------------------ */

const char cli_usage_text[] =
    "Usage: tfetch [OPTIONS] COMMAND ARGS...\n"
    "Move tensors to and from a tfetchd server (safetensors documents over HTTP, or UCX\n"
    "when the server offers it).\n"
    "\n"
    "Commands:\n"
    "  get URL [FILE]   fetch the document at URL (http://HOST:PORT/v1/tensors/NAME) and\n"
    "                   write it as safetensors to FILE (streamed to a temporary file,\n"
    "                   checked and renamed once complete), or to stdout when FILE is\n"
    "                   absent (not a terminal) or - (even a terminal)\n"
    "  get -d DIR URL...\n"
    "                   fetch each URL into DIR/NAME.safetensors (NAME: the URL's last path\n"
    "                   segment; DIR/NAME.raw with --raw)\n"
    "  put URL [FILE]   store the safetensors document read from FILE (or stdin) at URL\n"
    "                   (a file is sent as it is, never held whole in memory);\n"
    "                   with --dtype and --shape, FILE holds one raw tensor instead, stored\n"
    "                   under the last path segment of URL\n"
    "  put URL FILE URL FILE...\n"
    "                   store each FILE at the URL before it\n"
    "  call URL [FILE]  exchange: POST the document read from FILE (or stdin) to a route\n"
    "                   (http://HOST:PORT/v1/call/ROUTE) and write the reply to stdout\n"
    "  call -d DIR URL FILE URL FILE...\n"
    "                   one exchange per pair, each reply into DIR/STEM.safetensors (STEM:\n"
    "                   FILE's name without directory and extension)\n"
    "  rm URL...        delete the tensor at each URL\n"
    "  ls [BASE]        list the stored tensors of the server at BASE (http://HOST:PORT),\n"
    "                   in name order (a page at a time with --prefix, --limit, --after)\n"
    "  info [BASE]      print the server's /v1/info JSON\n"
    "  doctor [--json] [BASE]\n"
    "                   what limits tfetch between this host and the server, and what\n"
    "                   to change; exit 0 when the fast path is available (tfetch\n"
    "                   doctor --help)\n"
    "  feed declare FEED [FILE]\n"
    "                   declare the feed at FEED (http://HOST:PORT/v1/feeds/NAME) with the\n"
    "                   JSON declaration read from FILE (or stdin); print its stats\n"
    "  feed push FEED [FILE]\n"
    "                   push the document in FILE (or stdin) to device queue --device\n"
    "                   (per_device feeds), or as one round to every device (split and\n"
    "                   broadcast feeds, no --device)\n"
    "  feed pop FEED [FILE]\n"
    "                   take the next item of device queue --device (default 0), write it\n"
    "                   to FILE (or stdout) and acknowledge it\n"
    "  feed outfeed FEED [FILE]\n"
    "                   read the first outfeed item after --after into FILE (or stdout)\n"
    "  feed done FEED   mark the feed done: consumers drain it, then see end of data\n"
    "  feed stats FEED  print the feed's stats JSON\n"
    "\n"
    "A bare NAME ([A-Za-z0-9._-]{1,255}) may stand for a URL: BASE/v1/tensors/NAME (get, put,\n"
    "rm) or BASE/v1/call/NAME (call), BASE being $TFETCH_URL, else \"url = ...\" in\n"
    "${XDG_CONFIG_HOME:-~/.config}/tfetch/config, else http://127.0.0.1:7070; ls and info\n"
    "without BASE use it too.\n"
    "\n"
    "Options:\n"
    "  -u, --user ID          send ID as the user id (Tfetch-User), [A-Za-z0-9._-]{1,128}\n"
    "      --token TOKEN      send Authorization: Bearer TOKEN (default $TFETCH_TOKEN)\n"
    "      --cacert FILE      https: trust the PEM CA certificates in FILE (default\n"
    "                         $TFETCH_CA_FILE, else the system's); always verified\n"
    "      --cert FILE        https: present the PEM client certificate in FILE to a server\n"
    "                         that asks (tls-client-ca), when no token is sent (default\n"
    "                         $TFETCH_CERT)\n"
    "      --key FILE         the PEM private key of --cert (default $TFETCH_KEY, else the\n"
    "                         key is in the --cert file)\n"
    "  -r, --request-id ID    use ID as the request id (Tfetch-Request-Id) of the (first)\n"
    "                         request\n"
    "  -t, --timeout MS       whole-request timeout in milliseconds (default 0: none; a\n"
    "                         stalled server is caught by --stall-time instead)\n"
    "      --stall-time MS    fail a request whose transfer moves fewer than --stall-rate\n"
    "                         bytes a second for MS milliseconds in a row, waiting for the\n"
    "                         answer included (--wait is added; 0: never; default 10000)\n"
    "      --stall-rate BYTES the rate below which a transfer counts as stalled (default\n"
    "                         1024)\n"
    "      --max-body SIZE    refuse a response body larger than SIZE bytes (suffix K, M, G\n"
    "                         or T: powers of 1024; 0: no limit; default: this machine's\n"
    "                         memory, at least 2G)\n"
    "  -w, --wait MS          get: wait up to MS milliseconds for the tensor to appear;\n"
    "                         feed push: for room in a full queue; feed pop and outfeed:\n"
    "                         for an item\n"
    "      --ttl SECONDS      put: the document lives SECONDS (1..31622400), then is gone as\n"
    "                         if deleted\n"
    "      --if-match ETAG    put, rm: only while ETAG is the stored version (compare-and-\n"
    "                         swap), else exit 3 (HTTP 412) and nothing changes; get: only\n"
    "                         that version. ETAG is an ETag as put and --stats print it,\n"
    "                         quotes included, or *: while the name exists\n"
    "      --if-none-match    put: only if the name does not exist yet (create-only), else\n"
    "                         exit 3 (HTTP 412)\n"
    "      --wait-newer ETAG  get: wait up to --wait MS (default 60000) for a version newer\n"
    "                         than ETAG, and fetch it; exit 7 when none came\n"
    "      --range FIRST-LAST get: write bytes FIRST..LAST (FIRST-: to the end) of the stored\n"
    "                         document as they are (its safetensors bytes; HTTP Range)\n"
    "      --prefix P         ls: only names starting with P\n"
    "      --limit N          ls: at most N names (1..1000000); when more follow, say on\n"
    "                         stderr (--json: as \"next\") the --after of the next page\n"
    "  -P, --parallel N       get, put, call, rm: up to N requests in flight at once, over up\n"
    "                         to N connections per server (1..1024; default 1)\n"
    "  -d, --dir DIR          get, call: write each reply into DIR (created if missing)\n"
    "  -f, --format FMT       body format: safetensors (default) or shumai (stock Shumai's\n"
    "                         sm.network.tfetch format: one F32 tensor; get and call only)\n"
    "      --raw              get, call: write the single tensor's raw bytes (C order)\n"
    "                         instead of a document, and print its name, dtype and shape to\n"
    "                         stderr\n"
    "      --dtype DT         put, call: the input is one raw tensor of this dtype (F64 F32\n"
    "                         F16 BF16 F8_E4M3 F8_E5M2 I64 I32 I16 I8 U64 U32 U16 U8 BOOL\n"
    "                         F8_E8M0 F4 F6_E2M3 F6_E3M2 F8_E4M3FNUZ F8_E5M2FNUZ C64)\n"
    "      --shape DIMS       put, call: the raw tensor's shape, e.g. 2,3 (\"\" for a scalar)\n"
    "      --json             ls: print the listing as JSON\n"
    "      --transport POLICY\n"
    "                         auto: negotiate UCX with the server before the first request\n"
    "                         and fall back to HTTP (saying why) when it cannot be had;\n"
    "                         http: HTTP only; ucx: UCX or fail. Default: $TFETCH_TRANSPORT,\n"
    "                         else auto when it is worth it (a server on this host, or a\n"
    "                         put/call body of 1 MiB or more; no request waits for UCX\n"
    "                         over 50 ms, and no failure is remembered between runs),\n"
    "                         else HTTP first and UCX once the server offers it\n"
    "                         ($TFETCH_UPGRADE=lazy: always so). ls, info, feed and\n"
    "                         --format shumai always use HTTP\n"
    "      --device DEV       feed push: the device queue's index; feed pop: its index or\n"
    "                         name (default 0)\n"
    "      --seq N            feed push: the item's sequence number (Tfetch-Seq) in the\n"
    "                         user id's stream, so a retry is not enqueued twice\n"
    "      --after S          feed outfeed: read the first item with a sequence number above\n"
    "                         S (default 0); ls: only names after the name S\n"
    "      --consumer ID      feed pop: the consumer id (default tfetch): pops with another\n"
    "                         id wait for the lease of the last one\n"
    "  -s, --stats            after the requests print one JSON line per request to stderr\n"
    "                         (in argument order): {\"op\",\"transport\",\"bytes\",\"seconds\",\n"
    "                         \"request_id\",\"http_status\",\"status\",\"fallback\",\"etag\"}\n"
    "                         (fallback: why it went over HTTP when UCX was allowed; etag:\n"
    "                         the version got or stored), and \"stages\": where its time\n"
    "                         went in ms ({\"connect\",\"upgrade\",\"send\",\"server\",\n"
    "                         \"queue\",\"handler\",\"receive\",\"decode\",\"total\"}; null:\n"
    "                         not known; server, queue and handler are the server's own)\n"
    "      --explain          after each request print one paragraph to stderr: the path it\n"
    "                         took, its rate, that path's ceiling where known, where the\n"
    "                         time went, and why not a faster path\n"
    "  -q, --quiet            print nothing but results and errors (no progress bar)\n"
    "  -h, --help             show this help and exit\n"
    "  -V, --version          show the version and exit\n"
    "\n"
    "A progress bar (with rate and time left) is drawn on stderr when it is a terminal, one\n"
    "request is made and its transfer exceeds 1 MiB, over every transport (over UCX a body\n"
    "the bar follows goes in 16 MiB parts). With several requests, each failure is reported\n"
    "as it happens.\n"
    "\n"
    "Exit status (with several requests: that of the first failed one, in argument order):\n"
    "  0  success\n"
    "  1  usage error or invalid input (bad option, URL, dtype, shape or file contents)\n"
    "  2  not found (no such tensor, HTTP 404)\n"
    "  3  rejected by the server (another 4xx status)\n"
    "  4  server error (5xx) or malformed response\n"
    "  5  connection, timeout or transfer error\n"
    "  6  local I/O error (reading FILE, writing output, out of memory)\n"
    "  7  not modified (get --wait-newer: no newer version within the wait)\n"
    "Like curl --fail, a failed request writes nothing to FILE or stdout (a refused\n"
    "condition included): only its message, on stderr, and the exit status.\n";

/* "tfetch: MESSAGE" then tail on stderr, below a progress bar if one is up. */
static void vmsg(const char *tail, const char *fmt, va_list ap)
{
    cli_bar_end();
    fputs("tfetch: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(tail, stderr);
}

void cli_msg(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg("\n", fmt, ap);
    va_end(ap);
}

int cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg("\nTry 'tfetch --help' for more information.\n", fmt, ap);
    va_end(ap);
    return EXIT_USAGE;
}

/* Writes s as a JSON string (quotes included). */
void cli_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

void cli_print_stats(const tf_result_t *r)
{
    fputs("{\"op\":", stderr);
    cli_json_str(stderr, r->op);
    fputs(",\"transport\":", stderr);
    cli_json_str(stderr, r->transport);
    fprintf(stderr, ",\"bytes\":%" PRIu64 ",\"seconds\":%.6f,\"request_id\":",
            r->bytes_sent + r->bytes_received, r->seconds);
    cli_json_str(stderr, r->request_id);
    fprintf(stderr, ",\"http_status\":%d,\"status\":", r->http_status);
    cli_json_str(stderr, tf_err_name(r->status));
    fputs(",\"fallback\":", stderr);
    cli_json_str(stderr, r->fallback);
    fputs(",\"etag\":", stderr);
    cli_json_str(stderr, r->etag);
    /* where its time went, in ms (null: the stage did not apply or is not known) */
    const tf_stages_t *s = &r->stages;
    const struct {
        const char *name;
        double ms;
    } st[] = {{"connect", s->connect}, {"upgrade", s->upgrade}, {"send", s->send},
              {"server", s->server},   {"queue", s->queue},     {"handler", s->handler},
              {"receive", s->receive}, {"decode", s->decode},   {"total", s->total}};
    fputs(",\"stages\":{", stderr);
    for (size_t i = 0; i < sizeof st / sizeof st[0]; i++) {
        fprintf(stderr, "%s\"%s\":", i ? "," : "", st[i].name);
        if (st[i].ms < 0)
            fputs("null", stderr);
        else
            fprintf(stderr, "%.3f", st[i].ms);
    }
    fputs("}}\n", stderr);
}

static int exit_for(tf_status_t st, int http_status)
{
    if (st == TF_OK)
        return EXIT_OK;
    if (st == TF_ENOTMODIFIED)
        return EXIT_NOTMODIFIED;
    if (st == TF_ENOTFOUND || http_status == 404)
        return EXIT_NOTFOUND;
    if (st == TF_EVERSION)              /* whichever side found it */
        return EXIT_REJECTED;
    if (http_status >= 400 && http_status < 500)
        return EXIT_REJECTED;
    if (http_status >= 500)
        return EXIT_SERVER;
    switch (st) {
    case TF_ECONNECT:
    case TF_ETIMEDOUT:
    case TF_EIO:
    case TF_ECANCELED:
    case TF_ETOOBIG:
        return EXIT_TRANSFER;
    case TF_EURL:
    case TF_EINVAL:
        return EXIT_USAGE;
    case TF_ENOMEM:
        return EXIT_LOCAL;
    default:
        return EXIT_SERVER;
    }
}

int cli_request_failed(const tf_result_t *r, const char *what, const char *url,
                       tf_status_t st)
{
    const char *why = r->error[0] ? r->error : tf_strerror(st);
    if (r->http_status && strncmp(why, "HTTP ", 5) != 0)
        cli_msg("%s %s: %s (%s, HTTP %d)", what, url, why, tf_err_name(st), r->http_status);
    else
        cli_msg("%s %s: %s (%s)", what, url, why, tf_err_name(st));
    return exit_for(st, r->http_status);
}

int cli_is(const char *cmd, const char *name)
{
    return strcmp(cmd, name) == 0;
}

/* ---- checking a command's arguments ------------------------------------------------------- */

/* Checks the number of arguments of a command. */
static int check_args(const char *cmd, char **args, int nargs, const cli_opts_t *o)
{
    if (nargs < 1)
        return cli_usage_error("%s needs a URL or a name", cmd);
    if (cli_is(cmd, "ls") || cli_is(cmd, "info")) {
        if (nargs > 1)
            return cli_usage_error("too many arguments for %s", cmd);
    } else if (cli_is(cmd, "get")) {
        if (!o->dir && nargs > 2)
            return cli_usage_error("get with several URLs needs --dir");
    } else if (cli_is(cmd, "put") || cli_is(cmd, "call")) {
        if (nargs > 2 && nargs % 2 != 0)
            return cli_usage_error("%s takes URL FILE pairs", cmd);
        if (cli_is(cmd, "call") && !o->dir && nargs > 2)
            return cli_usage_error("call with several pairs needs --dir");
        if (cli_is(cmd, "call") && o->dir && nargs < 2)
            return cli_usage_error("call --dir takes URL FILE pairs");
        int stdin_uses = nargs == 1;
        for (int i = 1; i < nargs; i += 2)
            stdin_uses += strcmp(args[i], "-") == 0;
        if (stdin_uses > 1)
            return cli_usage_error("standard input (-) can be read only once");
    }
    return -1;
}

/* The versions, conditions, lifetimes, ranges and listing pages: which command takes which. */
static int check_conditions(const char *cmd, const cli_opts_t *o)
{
    int get = cli_is(cmd, "get"), put = cli_is(cmd, "put"), ls = cli_is(cmd, "ls");
    if (o->ttl_s && !put)
        return cli_usage_error("--ttl applies to put only");
    if (o->if_none_match && !put)
        return cli_usage_error("--if-none-match applies to put only");
    if (o->if_match && !put && !get && !cli_is(cmd, "rm"))
        return cli_usage_error("--if-match applies to put, get and rm only");
    if (o->if_match && o->if_none_match)
        return cli_usage_error("--if-match and --if-none-match exclude each other");
    if ((o->wait_newer || o->range) && !get)
        return cli_usage_error("--wait-newer and --range apply to get only");
    if (o->range && (o->wait_newer || o->if_match || o->dir || o->raw || o->wait_ms ||
                     (o->format && cli_is(o->format, "shumai"))))
        return cli_usage_error("--range writes bytes of one document: not with --wait, "
                               "--wait-newer, --if-match, --dir, --raw or --format");
    if ((o->prefix || o->limit) && !ls)
        return cli_usage_error("--prefix and --limit apply to ls only");
    return -1;
}

/* Checks the command's arguments and the options that apply to it only. */
static int check_command(const char *cmd, char **args, int nargs, const cli_opts_t *o)
{
    if (o->after_bad && !cli_is(cmd, "ls"))
        return cli_usage_error("bad --after '%s' (a number)", o->after_name);
    if (!cli_is(cmd, "feed") && (o->device || o->seq || o->consumer ||
                                 (o->after_name && !cli_is(cmd, "ls"))))
        return cli_usage_error("--device, --seq and --consumer apply to feed only, --after "
                               "to feed outfeed and ls");
    int rc = check_conditions(cmd, o);
    if (rc >= 0)
        return rc;
    if (cli_is(cmd, "feed"))
        return cli_check_feed(args, nargs, o);
    int batch = cli_is(cmd, "get") || cli_is(cmd, "put") || cli_is(cmd, "call") ||
                cli_is(cmd, "rm");
    rc = check_args(cmd, args, nargs, o);
    if (rc >= 0)
        return rc;
    if (o->wait_ms > 0 && !cli_is(cmd, "get"))
        return cli_usage_error("--wait applies to get only");
    if (o->raw && !cli_is(cmd, "get") && !cli_is(cmd, "call"))
        return cli_usage_error("--raw applies to get and call only");
    if ((o->dtype || o->shape) && !cli_is(cmd, "put") && !cli_is(cmd, "call"))
        return cli_usage_error("--dtype and --shape apply to put and call only");
    if (!o->dtype != !o->shape)
        return cli_usage_error("--dtype and --shape go together");
    if (o->json && !cli_is(cmd, "ls"))
        return cli_usage_error("--json applies to ls only");
    if (o->dir && !cli_is(cmd, "get") && !cli_is(cmd, "call"))
        return cli_usage_error("--dir applies to get and call only");
    if (o->parallel && !batch)
        return cli_usage_error("--parallel applies to get, put, call and rm only");
    if (o->format && cli_is(o->format, "shumai") && !cli_is(cmd, "get") && !cli_is(cmd, "call"))
        return cli_usage_error("--format shumai applies to get and call only");
    return -1;
}

/* ---- main -------------------------------------------------------------------------------- */

static int run(const char *cmd, char **args, int nargs, const cli_opts_t *o)
{
    tf_client_t *c = NULL;
    int rc;

    if (tf_client_new(&c) != TF_OK) {
        cli_msg("cannot create a client: out of memory");
        return EXIT_LOCAL;
    }
    int pairs = cli_is(cmd, "put") || cli_is(cmd, "call");
    int one = nargs == 1 || (nargs == 2 && (pairs || !o->dir));
    if ((rc = cli_configure(c, o, one)) >= 0)
        goto free_client;

    /* The strict ucx policy wants UCX from the first request on, and waits for it: a failure
     * here is reported by the requests (they fail, saying why). Under auto, given or not,
     * the library decides by itself (its eager upgrade policy: a server on this host, or a
     * body of 1 MiB or more, is negotiated with before the first request, and never waited
     * on past a few tens of milliseconds); the tool keeps no cache of its own. */
    const char *policy = o->transport ? o->transport : getenv("TFETCH_TRANSPORT");
    int can_upgrade = !cli_is(cmd, "ls") && !cli_is(cmd, "info") && !cli_is(cmd, "feed") &&
                      !(o->format && cli_is(o->format, "shumai"));
    if (can_upgrade && policy && strcasecmp(policy, "ucx") == 0)
        tf_client_upgrade(c, args[0]);
    /* After the upgrade, which is a request of its own: --request-id names the first of the
     * user's. */
    if (o->request_id && tf_client_set_request_id(c, o->request_id) != TF_OK) {
        rc = cli_usage_error("bad --request-id '%s' (expected [A-Za-z0-9._:-]{1,128})",
                             o->request_id);
        goto free_client;
    }

    if (cli_is(cmd, "ls")) {
        rc = cli_cmd_ls(c, o, args[0]);
    } else if (cli_is(cmd, "info")) {
        rc = cli_cmd_info(c, args[0]);
    } else if (cli_is(cmd, "feed")) {
        rc = cli_cmd_feed(c, o, args, nargs);
    } else {
        cli_cmd_t k = cli_is(cmd, "get")    ? CMD_GET
                      : cli_is(cmd, "put")  ? CMD_PUT
                      : cli_is(cmd, "call") ? CMD_CALL
                                            : CMD_RM;
        rc = cli_cmd_batch(c, o, k, args, nargs);
    }
    cli_bar_end();
    /* A request was made unless the command failed before reaching the network. */
    if ((o->stats || o->explain) &&
        (cli_is(cmd, "ls") || cli_is(cmd, "info") || cli_is(cmd, "feed")) &&
        tf_client_last(c)->op[0]) {
        if (o->stats)
            cli_print_stats(tf_client_last(c));
        if (o->explain)
            cli_print_explain(c, nargs > 0 ? args[0] : NULL, tf_client_last(c));
    }

free_client:
    tf_client_free(c);
    return rc;
}

int main(int argc, char **argv)
{
    cli_opts_t o = {.timeout_ms = -1, .stall_ms = -1, .stall_rate = -1, .max_body = -1};

    if (argc > 1 && strcmp(argv[1], "doctor") == 0)     /* its own options: cli/doctor.c */
        return tfc_doctor(argc - 1, argv + 1);
    int rc = cli_parse_options(argc, argv, &o);
    if (rc >= 0)
        return rc;
    if (optind >= argc)
        return cli_usage_error("no command given");
    const char *cmd = argv[optind];
    static const char *const commands[] = {"get", "put", "call", "rm", "ls", "info", "feed"};
    int known = 0;
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        known |= strcmp(cmd, commands[i]) == 0;
    if (!known)
        return cli_usage_error("unknown command '%s'", cmd);
    int nargs = argc - optind - 1;
    /* The arguments, with bare names resolved against the default server (one slot more
     * for ls and info without BASE). */
    char **args = calloc((size_t)nargs + 2, sizeof *args), **owned = calloc((size_t)nargs + 2,
                                                                          sizeof *owned);
    int nowned = 0;
    if (!args || !owned) {
        free(args);
        free(owned);
        cli_msg("out of memory");
        return EXIT_LOCAL;
    }
    memcpy(args, argv + optind + 1, (size_t)nargs * sizeof *args);
    if ((rc = cli_resolve_urls(cmd, args, &nargs, &o, owned, &nowned)) < 0 &&
        (rc = check_command(cmd, args, nargs, &o)) < 0)
        rc = run(cmd, args, nargs, &o);
    for (int i = 0; i < nowned; i++)
        free(owned[i]);
    free(owned);
    free(args);
    return rc;
}
