/* config.c - the tfetch command's configuration: its options, the client's settings made
 * from them and the environment ($TFETCH_TOKEN, $TFETCH_CA_FILE, $TFETCH_CERT, $TFETCH_KEY,
 * $TFETCH_TRANSPORT, $TFETCH_UPGRADE), and the default server a bare name refers to
 * ($TFETCH_URL or the config file).
 *
 * Reads the options once, at start; single-threaded.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli/cli.h"

/* ---- argument helpers -------------------------------------------------------------------- */

int cli_parse_ms(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0)
        return -1;
    *out = v;
    return 0;
}

/* A size in bytes: digits, then optionally K, M, G or T (powers of 1024). */
static int parse_size(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || v < 0)
        return -1;
    int shift = 0;
    switch (*end) {
    case '\0': break;
    case 'K': case 'k': shift = 10; end++; break;
    case 'M': case 'm': shift = 20; end++; break;
    case 'G': case 'g': shift = 30; end++; break;
    case 'T': case 't': shift = 40; end++; break;
    default: return -1;
    }
    if (*end || v > (INT64_MAX >> shift))
        return -1;
    *out = (int64_t)v << shift;
    return 0;
}

/* "2,3", "[2,3]", "" or "[]" (a scalar). */
int cli_parse_shape(const char *s, int *rank, int64_t shape[TF_MAX_RANK])
{
    char buf[512];
    size_t n = strlen(s);
    if (n >= sizeof(buf))
        return -1;
    memcpy(buf, s, n + 1);
    char *p = buf;
    while (*p == ' ')
        p++;
    if (*p == '[') {
        char *close_br = strrchr(p, ']');
        if (!close_br)
            return -1;
        for (char *q = close_br + 1; *q; q++)
            if (*q != ' ')
                return -1;
        *close_br = '\0';
        p++;
    }
    int r = 0;
    char *q = p;
    while (*q == ' ')
        q++;
    if (*q == '\0') {
        *rank = 0;
        return 0;
    }
    for (;;) {
        while (*p == ' ')
            p++;
        if (*p < '0' || *p > '9' || r == TF_MAX_RANK)
            return -1;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno || v < 0)
            return -1;
        shape[r++] = v;
        p = end;
        while (*p == ' ')
            p++;
        if (*p == '\0')
            break;
        if (*p != ',')
            return -1;
        p++;
    }
    *rank = r;
    return 0;
}

/* ---- options -------------------------------------------------------------------------- */

enum { OPT_RAW = 256, OPT_DTYPE, OPT_SHAPE, OPT_JSON, OPT_TRANSPORT, OPT_DEVICE, OPT_SEQ,
       OPT_AFTER, OPT_CONSUMER, OPT_TOKEN,
       OPT_CACERT, OPT_CERT, OPT_KEY, OPT_STALL_TIME, OPT_STALL_RATE, OPT_MAX_BODY,
       OPT_TTL, OPT_IF_MATCH, OPT_IF_NONE_MATCH, OPT_WAIT_NEWER, OPT_RANGE, OPT_PREFIX,
       OPT_LIMIT, OPT_EXPLAIN };

static const struct option long_opts[] = {
    {"user", required_argument, NULL, 'u'},
    {"request-id", required_argument, NULL, 'r'},
    {"token", required_argument, NULL, OPT_TOKEN},
    {"cacert", required_argument, NULL, OPT_CACERT},
    {"cert", required_argument, NULL, OPT_CERT},
    {"key", required_argument, NULL, OPT_KEY},
    {"timeout", required_argument, NULL, 't'},
    {"stall-time", required_argument, NULL, OPT_STALL_TIME},
    {"stall-rate", required_argument, NULL, OPT_STALL_RATE},
    {"max-body", required_argument, NULL, OPT_MAX_BODY},
    {"wait", required_argument, NULL, 'w'},
    {"parallel", required_argument, NULL, 'P'},
    {"dir", required_argument, NULL, 'd'},
    {"format", required_argument, NULL, 'f'},
    {"raw", no_argument, NULL, OPT_RAW},
    {"dtype", required_argument, NULL, OPT_DTYPE},
    {"shape", required_argument, NULL, OPT_SHAPE},
    {"json", no_argument, NULL, OPT_JSON},
    {"transport", required_argument, NULL, OPT_TRANSPORT},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"seq", required_argument, NULL, OPT_SEQ},
    {"after", required_argument, NULL, OPT_AFTER},
    {"consumer", required_argument, NULL, OPT_CONSUMER},
    {"ttl", required_argument, NULL, OPT_TTL},
    {"if-match", required_argument, NULL, OPT_IF_MATCH},
    {"if-none-match", no_argument, NULL, OPT_IF_NONE_MATCH},
    {"wait-newer", required_argument, NULL, OPT_WAIT_NEWER},
    {"range", required_argument, NULL, OPT_RANGE},
    {"prefix", required_argument, NULL, OPT_PREFIX},
    {"limit", required_argument, NULL, OPT_LIMIT},
    {"stats", no_argument, NULL, 's'},
    {"explain", no_argument, NULL, OPT_EXPLAIN},
    {"quiet", no_argument, NULL, 'q'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

/* A decimal number, digits only. 0, or -1. */
static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] < '0' || s[0] > '9')
        return -1;
    *out = (uint64_t)v;
    return 0;
}

/* --range FIRST-LAST or FIRST- (bytes). 0, or -1. */
static int parse_range(const char *s, cli_opts_t *o)
{
    char first[32];
    const char *dash = strchr(s, '-');
    uint64_t a, b = 0;
    if (!dash || (size_t)(dash - s) >= sizeof first)
        return -1;
    memcpy(first, s, (size_t)(dash - s));
    first[dash - s] = '\0';
    if (parse_u64(first, &a) != 0 || (dash[1] && (parse_u64(dash + 1, &b) != 0 || b < a)))
        return -1;
    o->range = 1;
    o->range_first = a;
    o->range_len = dash[1] ? b - a + 1 : 0;
    return 0;
}

/* Parses options into o; returns -1 to continue, or an exit code. */
int cli_parse_options(int argc, char **argv, cli_opts_t *o)
{
    int ch;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, ":u:r:t:w:P:d:f:sqhV", long_opts, NULL)) != -1) {
        switch (ch) {
        case 'u': o->user = optarg; break;
        case OPT_TOKEN: o->token = optarg; break;
        case OPT_CACERT: o->cacert = optarg; break;
        case OPT_CERT: o->cert = optarg; break;
        case OPT_KEY: o->key = optarg; break;
        case 'r': o->request_id = optarg; break;
        case 't':
            if (cli_parse_ms(optarg, &o->timeout_ms) != 0)
                return cli_usage_error("bad --timeout '%s' (milliseconds)", optarg);
            break;
        case OPT_STALL_TIME:
            if (cli_parse_ms(optarg, &o->stall_ms) != 0)
                return cli_usage_error("bad --stall-time '%s' (milliseconds)", optarg);
            break;
        case OPT_STALL_RATE:
            if (cli_parse_ms(optarg, &o->stall_rate) != 0 || o->stall_rate < 1)
                return cli_usage_error("bad --stall-rate '%s' (bytes a second, at least 1)",
                                       optarg);
            break;
        case OPT_MAX_BODY:
            if (parse_size(optarg, &o->max_body) != 0)
                return cli_usage_error("bad --max-body '%s' (bytes, suffix K, M, G or T)", optarg);
            break;
        case 'w':
            if (cli_parse_ms(optarg, &o->wait_ms) != 0)
                return cli_usage_error("bad --wait '%s' (milliseconds)", optarg);
            break;
        case 'P':
            if (cli_parse_ms(optarg, &o->parallel) != 0 || o->parallel < 1 || o->parallel > 1024)
                return cli_usage_error("bad --parallel '%s' (1..1024)", optarg);
            break;
        case 'd': o->dir = optarg; break;
        case 'f':
            if (strcmp(optarg, "safetensors") != 0 && strcmp(optarg, "shumai") != 0)
                return cli_usage_error("unknown --format '%s' (safetensors or shumai)", optarg);
            o->format = optarg;
            break;
        case OPT_RAW: o->raw = 1; break;
        case OPT_DTYPE: o->dtype = optarg; break;
        case OPT_SHAPE: o->shape = optarg; break;
        case OPT_JSON: o->json = 1; break;
        case OPT_TRANSPORT:
            if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "http") != 0 &&
                strcmp(optarg, "ucx") != 0)
                return cli_usage_error("unknown --transport '%s' (auto, http or ucx)", optarg);
            o->transport = optarg;
            break;
        case OPT_DEVICE: o->device = optarg; break;
        case OPT_CONSUMER: o->consumer = optarg; break;
        case OPT_SEQ:
        case OPT_AFTER: {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(optarg, &end, 10);
            int bad = errno || end == optarg || *end || optarg[0] == '-';
            if (ch == OPT_AFTER) {          /* ls takes a name: judged with the command */
                o->after_name = optarg;
                o->after_bad = bad;
                o->after = bad ? 0 : (uint64_t)v;
                break;
            }
            if (bad)
                return cli_usage_error("bad --seq '%s' (a number)", optarg);
            o->seq = (uint64_t)v;
            break;
        }
        case OPT_TTL:
        case OPT_LIMIT: {
            uint64_t v;
            int ttl = ch == OPT_TTL;
            if (parse_u64(optarg, &v) != 0 || v < 1 || v > (ttl ? 31622400u : 1000000u))
                return cli_usage_error(ttl ? "bad --ttl '%s' (seconds, 1..31622400)"
                                           : "bad --limit '%s' (1..1000000)", optarg);
            *(ttl ? &o->ttl_s : &o->limit) = v;
            break;
        }
        case OPT_IF_MATCH: o->if_match = optarg; break;
        case OPT_IF_NONE_MATCH: o->if_none_match = 1; break;
        case OPT_EXPLAIN: o->explain = 1; break;
        case OPT_WAIT_NEWER: o->wait_newer = optarg; break;
        case OPT_PREFIX: o->prefix = optarg; break;
        case OPT_RANGE:
            if (parse_range(optarg, o) != 0)
                return cli_usage_error("bad --range '%s' (FIRST-LAST or FIRST-, in bytes)",
                                       optarg);
            break;
        case 's': o->stats = 1; break;
        case 'q': o->quiet = 1; break;
        case 'h': fputs(cli_usage_text, stdout); return EXIT_OK;
        case 'V': printf("tfetch %s (libtfetch %s)\n", TF_VERSION, tf_version()); return EXIT_OK;
        case ':': return cli_usage_error("option '%s' needs an argument", argv[optind - 1]);
        default: return cli_usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    return -1;
}


/* ---- the client's settings ------------------------------------------------------------- */

/* auto, http or ucx, in any case (as the library reads TFETCH_TRANSPORT). */
static int is_policy(const char *v)
{
    return strcasecmp(v, "auto") == 0 || strcasecmp(v, "http") == 0 ||
           strcasecmp(v, "ucx") == 0;
}

/* Sets the client up from the options; returns -1 to continue, or an exit code. */
int cli_configure(tf_client_t *c, const cli_opts_t *o, int one_request)
{
    if (o->user && tf_client_set_user(c, o->user) != TF_OK)
        return cli_usage_error("bad --user '%s' (expected [A-Za-z0-9._-]{1,128})", o->user);
    /* The token itself is never printed. */
    if (o->token && tf_client_set_token(c, o->token) != TF_OK)
        return cli_usage_error("bad --token (expected [A-Za-z0-9-._~+/]+ then '='s, at most 512 "
                               "characters)");
    const char *tok = getenv("TFETCH_TOKEN");
    if (!o->token && tok && *tok && tf_client_set_token(c, tok) != TF_OK)
        return cli_usage_error("TFETCH_TOKEN is not a bearer token (expected [A-Za-z0-9-._~+/]+ "
                               "then '='s, at most 512 characters)");
    if (o->cacert && tf_client_set_ca_file(c, o->cacert) != TF_OK)
        return cli_usage_error("--cacert %s: cannot read the file", o->cacert);
    const char *ca = getenv("TFETCH_CA_FILE");
    if (!o->cacert && ca && *ca && tf_client_set_ca_file(c, ca) != TF_OK)
        return cli_usage_error("TFETCH_CA_FILE %s: cannot read the file", ca);
    const char *cert = o->cert, *key = o->key;
    if (!cert) {                    /* both from the environment, or neither */
        cert = getenv("TFETCH_CERT");
        key = key ? key : getenv("TFETCH_KEY");
        cert = cert && *cert ? cert : NULL;
        key = key && *key ? key : NULL;
    }
    if (key && !cert)
        return cli_usage_error("--key needs --cert (or TFETCH_CERT)");
    if (cert && tf_client_set_cert(c, cert, key) != TF_OK)
        return cli_usage_error("%s %s%s%s: cannot read the file",
                               o->cert ? "--cert" : "TFETCH_CERT",
                               cert, key ? ", key " : "", key ? key : "");
    if (o->timeout_ms >= 0)
        tf_client_set_timeout(c, o->timeout_ms);
    if ((o->stall_ms >= 0 || o->stall_rate >= 0) &&
        tf_client_set_stall(c, o->stall_rate >= 0 ? (uint64_t)o->stall_rate : 1024u,
                            o->stall_ms >= 0 ? o->stall_ms : 10000L) != TF_OK)
        return cli_usage_error("bad --stall-time or --stall-rate");
    if (o->max_body >= 0)
        tf_client_set_max_body(c, (uint64_t)o->max_body);
    if (o->parallel > 0 && tf_client_set_max_connections(c, o->parallel) != TF_OK)
        return cli_usage_error("bad --parallel %ld", o->parallel);
    if (o->format && cli_is(o->format, "shumai"))
        tf_client_set_format(c, TF_FORMAT_SHUMAI);
    const char *env = getenv("TFETCH_TRANSPORT");
    if (!o->transport && env && *env && !is_policy(env))
        return cli_usage_error("TFETCH_TRANSPORT='%s' is not auto, http or ucx", env);
    const char *up = getenv("TFETCH_UPGRADE");
    if (up && *up && strcasecmp(up, "eager") != 0 && strcasecmp(up, "lazy") != 0)
        return cli_usage_error("TFETCH_UPGRADE='%s' is not eager or lazy", up);
    if (o->transport)
        tf_client_set_transport(c, cli_is(o->transport, "ucx")    ? TF_TRANSPORT_UCX
                                   : cli_is(o->transport, "http") ? TF_TRANSPORT_HTTP
                                                              : TF_TRANSPORT_AUTO);
    if (!o->quiet && one_request && isatty(STDERR_FILENO))
        cli_progress_attach(c);
    return -1;
}

/* ---- names instead of URLs: the default server ---------------------------------------- */

#define DEFAULT_BASE "http://127.0.0.1:7070"

/* The server a bare name refers to: $TFETCH_URL, else "url = ..." in
 * ${XDG_CONFIG_HOME:-~/.config}/tfetch/config, else the embedded default. Into buf, without a
 * trailing slash. */
static void default_base(char *buf, size_t n)
{
    const char *env = getenv("TFETCH_URL");
    snprintf(buf, n, "%s", DEFAULT_BASE);
    if (env && *env) {
        snprintf(buf, n, "%s", env);
    } else {
        char path[4096];
        const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
        if (xdg && *xdg)
            snprintf(path, sizeof path, "%s/tfetch/config", xdg);
        else if (home && *home)
            snprintf(path, sizeof path, "%s/.config/tfetch/config", home);
        else
            path[0] = '\0';
        FILE *f = path[0] ? fopen(path, "r") : NULL;
        char line[4096];
        while (f && fgets(line, sizeof line, f)) {
            char *p = line + strspn(line, " \t");
            if (strncmp(p, "url", 3) != 0)
                continue;
            p += 3 + strspn(p + 3, " \t");
            if (*p != '=')
                continue;
            p += 1 + strspn(p + 1, " \t");
            p[strcspn(p, " \t\r\n#")] = '\0';
            if (*p)
                snprintf(buf, n, "%s", p);
        }
        if (f)
            fclose(f);
    }
    size_t k = strlen(buf);
    while (k > 0 && buf[k - 1] == '/')
        buf[--k] = '\0';
}

/* A tensor or route name as the CLI takes it in place of a URL. */
static int bare_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 255 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] >= 'a' && s[i] <= 'z') && !(s[i] >= 'A' && s[i] <= 'Z') &&
            !(s[i] >= '0' && s[i] <= '9') && !strchr("._-", s[i]))
            return 0;
    return 1;
}

/* Where the command takes a URL, a bare name means one on the default server: get, put and
 * rm a tensor (BASE/v1/tensors/NAME), call a route (BASE/v1/call/NAME); ls and info take the
 * server itself, BASE when absent. Rewrites args[] in place (new strings in owned[], freed by
 * the caller); returns -1, or a usage error's exit code. */
int cli_resolve_urls(const char *cmd, char **args, int *nargs, const cli_opts_t *o,
                     char **owned, int *nowned)
{
    char base[2048];
    default_base(base, sizeof base);
    if ((cli_is(cmd, "ls") || cli_is(cmd, "info")) && *nargs == 0) {
        if (!(owned[(*nowned)++] = args[0] = strdup(base)))
            return EXIT_LOCAL;
        *nargs = 1;
        return -1;
    }
    int pairs = cli_is(cmd, "put") || cli_is(cmd, "call");
    for (int i = 0; i < *nargs; i++) {
        int is_url_slot = cli_is(cmd, "rm") || (cli_is(cmd, "get") && (o->dir || i == 0)) ||
                          (pairs && i % 2 == 0);
        if (!is_url_slot || strstr(args[i], "://"))
            continue;
        if (cli_is(cmd, "ls") || cli_is(cmd, "info") || !bare_name(args[i]))
            return cli_usage_error("'%s' is neither a URL (http://HOST:PORT/...) nor a tensor name "
                                   "([A-Za-z0-9._-]{1,255})", args[i]);
        size_t n = strlen(base) + strlen(args[i]) + 16;
        char *u = malloc(n);
        if (!u)
            return EXIT_LOCAL;
        snprintf(u, n, "%s/v1/%s/%s", base, cli_is(cmd, "call") ? "call" : "tensors", args[i]);
        args[i] = owned[(*nowned)++] = u;
    }
    return -1;
}
