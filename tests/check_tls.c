/* check_tls.c - end-to-end suite "tls": tfetchd with tls-cert and tls-key (port 0, the one
 * spawner in tests/fixtures.c), driven with curl and libtfetch over https. The certificates
 * are made at test time with certtool (GnuTLS, package gnutls-bin) in a temporary directory
 * per test: a CA, a server certificate for 127.0.0.1 signed by it, an expired one signed by
 * it, and a self-signed one. Cases: curl --cacert PUT/GET round trip and /v1/info's "tls";
 * libtfetch PUT/GET with tf_client_set_ca_file (over "http", with a fallback saying why not
 * UCX) and with TFETCH_CA_FILE; no CA file, an expired and a self-signed certificate refused
 * with TF_ECONNECT and libcurl's reason; plain http to the TLS port refused at once and the
 * daemon still serving; a bearer token over https (401 without it); tls-cert alone, an
 * unreadable and a broken file refusing to start with a message naming the setting. mTLS
 * (tls-client-ca): client certificates for alice and bob by the CA, one with alice's subject
 * by a second CA, an expired one of alice's; curl --cert acting as the principal of alice's
 * cert: line with its rights (403 outside them, a token deciding when sent), the other CA's,
 * the expired and the server's own certificate refused with 401, no certificate and no
 * token 401, libtfetch's tf_client_set_cert, TFETCH_CERT and tfetch --cert, a cert: line
 * removed and SIGHUP then 401, and tls-client-ca's bad settings refused at start. Each test
 * runs in its own forked process (Check), so the directory and daemon are per test.
 */
#include "config.h"
#include "tests/suites.h"
#include "tests/fixtures.h"
#include "client/tfetch.h"
#include "daemon/log.h"
#include "transports/hostid.h"

#include <arpa/inet.h>
#include <check.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static td_daemon_t D;
static char dir[64];                    /* the certificates of this test */
static char base[64];                   /* https://127.0.0.1:PORT */

static void write_file(const char *name, const char *text)
{
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    ck_assert_msg(f != NULL, "cannot write %s", p);
    fchmod(fileno(f), 0600);        /* a token file others can read is refused */
    fputs(text, f);
    fclose(f);
}

static void sh(const char *cmd)
{
    char o[4096];
    int rc = td_run(cmd, o, sizeof o);
    ck_assert_msg(rc == 0, "'%s' failed (%d): %s", cmd, rc, o);
}

/* A key NAME.key and a certificate NAME.pem from template NAME.tmpl, signed by the CA whose
 * files are CA.pem and CA.key (or self-signed when ca is NULL). */
static void make_cert(const char *name, const char *tmpl, const char *ca)
{
    char t[64], cmd[1024];
    snprintf(t, sizeof t, "%s.tmpl", name);
    write_file(t, tmpl);
    snprintf(cmd, sizeof cmd, "cd %s && certtool --generate-privkey --key-type=ecdsa "
             "--outfile %s.key >/dev/null 2>&1", dir, name);
    sh(cmd);
    if (ca)
        snprintf(cmd, sizeof cmd, "cd %s && certtool --generate-certificate --load-privkey "
                 "%s.key --load-ca-certificate %s.pem --load-ca-privkey %s.key --template %s.tmpl "
                 "--outfile %s.pem 2>&1", dir, name, ca, ca, name, name);
    else
        snprintf(cmd, sizeof cmd, "cd %s && certtool --generate-self-signed --load-privkey %s.key "
                 "--template %s.tmpl --outfile %s.pem 2>&1", dir, name, name, name);
    sh(cmd);
}

static void make_certs(void)
{
    snprintf(dir, sizeof dir, "/tmp/tfetch-tls-XXXXXX");
    ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp");
    char o[256];
    ck_assert_msg(td_run("command -v certtool", o, sizeof o) == 0,
                  "certtool not found: install gnutls-bin (scripts/tf-dev)");
    make_cert("ca", "cn = \"tfetch test CA\"\nca\ncert_signing_key\nexpiration_days = 30\n",
              NULL);
    make_cert("srv", "cn = \"127.0.0.1\"\nip_address = \"127.0.0.1\"\ntls_www_server\n"
                     "expiration_days = 30\n", "ca");
    make_cert("old", "cn = \"127.0.0.1\"\nip_address = \"127.0.0.1\"\ntls_www_server\n"
                     "activation_date = \"2020-01-01 00:00:00\"\n"
                     "expiration_date = \"2021-01-01 00:00:00\"\n", "ca");
    make_cert("self", "cn = \"127.0.0.1\"\nip_address = \"127.0.0.1\"\ntls_www_server\n"
                      "expiration_days = 30\n", NULL);
}

/* Client certificates: alice (CN=alice,O=ml) and bob by the CA; another CA's certificate
 * with alice's very subject; an expired one of alice's by the CA. */
static void make_client_certs(void)
{
    make_cert("ca2", "cn = \"another CA\"\nca\ncert_signing_key\nexpiration_days = 30\n", NULL);
    make_cert("alice", "cn = \"alice\"\norganization = \"ml\"\ntls_www_client\n"
                       "expiration_days = 30\n", "ca");
    make_cert("bob", "cn = \"bob\"\norganization = \"ml\"\ntls_www_client\n"
                     "expiration_days = 30\n", "ca");
    make_cert("mallory", "cn = \"alice\"\norganization = \"ml\"\ntls_www_client\n"
                         "expiration_days = 30\n", "ca2");
    make_cert("alice-old", "cn = \"alice\"\norganization = \"ml\"\ntls_www_client\n"
                           "activation_date = \"2020-01-01 00:00:00\"\n"
                           "expiration_date = \"2021-01-01 00:00:00\"\n", "ca");
}

static const char *path(const char *name)
{
    static char p[16][128];                 /* an argument list holds up to 16 */
    static int i;
    i = (i + 1) % 16;
    snprintf(p[i], sizeof p[i], "%s/%s", dir, name);
    return p[i];
}

static void cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    td_run(cmd, NULL, 0);
    td_cleanup();
}

/* Starts tfetchd with certificate NAME.pem and NAME.key, plus extra args (up to 4). */
static void start_tls(const char *name, const char *a1, const char *a2)
{
    char cert[64], key[64];
    snprintf(cert, sizeof cert, "%s.pem", name);
    snprintf(key, sizeof key, "%s.key", name);
    const char *args[] = {"--tls-cert", path(cert), "--tls-key", path(key), a1, a2, NULL};
    ck_assert_msg(td_start(&D, args) == 0, "tfetchd did not start");
    snprintf(base, sizeof base, "https://127.0.0.1:%u", D.port);
}

static void stop_clean(void)
{
    ck_assert_int_eq(td_stop(&D, SIGTERM, 10000), 0);
    cleanup();
}

/* curl -sS ARGS URL; returns the HTTP status (0: no response), the body in o. */
static int curl(const char *args, const char *url_path, char *o, size_t cap)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "curl -sS --max-time 20 %s -w '\\n%%{http_code}' '%s%s' 2>&1",
             args, base, url_path);
    td_run(cmd, o, cap);
    char *nl = strrchr(o, '\n');
    return nl ? atoi(nl + 1) : 0;
}

START_TEST(test_curl_round_trip)
{
    make_certs();
    start_tls("srv", NULL, NULL);
    char o[8192], a[512];
    snprintf(a, sizeof a, "--cacert %s", path("ca.pem"));
    ck_assert_int_eq(curl(a, "/v1/info", o, sizeof o), 200);
    /* UCX is not encrypted: with TLS on it is offered on this host only (ucx-trusted unset) */
    ck_assert_msg(strstr(o, "\"tls\":\"on\"") && strstr(o, "\"trusted\":\"same-host\""),
                  "%s", o);
    snprintf(a, sizeof a, "--cacert %s -D -", path("ca.pem"));
    ck_assert_int_eq(curl(a, "/v1/tensors", o, sizeof o), 200);
    ck_assert_msg(strcasestr(o, "Tfetch-Upgrade: ucx"), "a client on this host is offered UCX: %s",
                  o);
    snprintf(a, sizeof a, "--cacert %s -X PUT --data-binary abcdefgh -H 'Content-Type: "
             "application/octet-stream' -H 'Tfetch-Dtype: F32' -H 'Tfetch-Shape: 2'",
             path("ca.pem"));
    int st = curl(a, "/v1/tensors/w", o, sizeof o);
    ck_assert_msg(st == 200 || st == 201 || st == 204, "%d %s", st, o);
    snprintf(a, sizeof a, "--cacert %s -H 'Accept: application/octet-stream'", path("ca.pem"));
    ck_assert_int_eq(curl(a, "/v1/tensors/w", o, sizeof o), 200);
    ck_assert_msg(strncmp(o, "abcdefgh", 8) == 0, "%s", o);
    /* the server picks AES-128-GCM though curl (OpenSSL) lists AES-256-GCM first; TLS 1.2
     * too, and nothing older */
    snprintf(a, sizeof a, "-v --cacert %s", path("ca.pem"));
    ck_assert_int_eq(curl(a, "/healthz", o, sizeof o), 200);
    ck_assert_msg(strstr(o, "TLSv1.3 / TLS_AES_128_GCM_SHA256"), "%s", o);
    snprintf(a, sizeof a, "-v --tls-max 1.2 --cacert %s", path("ca.pem"));
    ck_assert_int_eq(curl(a, "/healthz", o, sizeof o), 200);
    ck_assert_msg(strstr(o, "TLSv1.2 / ECDHE-ECDSA-AES128-GCM-SHA256"), "%s", o);
    snprintf(a, sizeof a, "-v --tls-max 1.1 --cacert %s", path("ca.pem"));
    ck_assert_int_eq(curl(a, "/healthz", o, sizeof o), 0);
    /* no CA: curl's own verification refuses the server */
    ck_assert_int_eq(curl("", "/v1/info", o, sizeof o), 0);
    stop_clean();
}
END_TEST

static tf_doc_t *small_doc(float *v)
{
    tf_doc_t *in = tf_doc_new();
    int64_t shape[1] = {2};
    ck_assert_int_eq(tf_doc_add(in, "t", TF_F32, 1, shape, v, 2 * sizeof *v, TF_BORROW), TF_OK);
    return in;
}

/* A client made now takes its settings from the environment: a get works; with var naming an
 * unreadable file instead, its requests fail with TF_EINVAL naming var. */
static void env_good_then_bad(const char *url, const char *var, const char *bad)
{
    tf_client_t *c = NULL;
    tf_doc_t *got = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_get(c, url, 0, &got), TF_OK);
    tf_doc_free(got);
    got = NULL;
    tf_client_free(c);
    setenv(var, bad, 1);
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_get(c, url, 0, &got), TF_EINVAL);
    ck_assert_msg(strstr(tf_client_last(c)->error, var), "%s", tf_client_last(c)->error);
    tf_client_free(c);
}

START_TEST(test_libtfetch_round_trip)
{
    make_certs();
    start_tls("srv", NULL, NULL);
    unsetenv("TFETCH_CA_FILE");
    float v[2] = {3, 4};
    tf_doc_t *in = small_doc(v), *got = NULL;
    char url[128];
    snprintf(url, sizeof url, "%s/v1/tensors/lib", base);
    tf_client_t *c = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_set_ca_file(c, path("nonexistent.pem")), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_ca_file(c, path("ca.pem")), TF_OK);
    /* The upgrade is negotiated over https; on one host UCX carries nothing over a wire, so
     * the put goes over it (or shared memory) in the clear. */
    ck_assert_int_eq(tf_put(c, url, in), TF_OK);
    ck_assert_msg(strncmp(tf_client_last(c)->transport, "ucx", 3) == 0 ||
                  strncmp(tf_client_last(c)->transport, "shm", 3) == 0,
                  "transport %s, fallback '%s'", tf_client_last(c)->transport,
                  tf_client_last(c)->fallback);
    ck_assert_int_eq(tf_get(c, url, 0, &got), TF_OK);
    ck_assert_uint_eq(tf_doc_count(got), 1);
    const tf_tensor_t *t = tf_doc_at(got, 0);
    ck_assert_mem_eq(t->data, v, sizeof v);
    tf_doc_free(got);
    got = NULL;
    /* NULL: the system's store again, which does not know this CA; the upgraded connection
     * made under the old verification is closed with it */
    ck_assert_int_eq(tf_client_set_ca_file(c, NULL), TF_OK);
    ck_assert_int_eq(tf_get(c, url, 0, &got), TF_ECONNECT);
    ck_assert_msg(tf_client_last(c)->error[0], "no message");
    tf_client_free(c);
    /* TFETCH_CA_FILE is the default; an unreadable one fails requests until set */
    setenv("TFETCH_CA_FILE", path("ca.pem"), 1);
    env_good_then_bad(url, "TFETCH_CA_FILE", path("nonexistent.pem"));
    unsetenv("TFETCH_CA_FILE");
    tf_doc_free(in);
    /* the CLI: --cacert */
    const char *cli = getenv("TFETCH_CLI") ? getenv("TFETCH_CLI") : "./cli/tfetch";
    char cmd[1024], o[4096];
    snprintf(cmd, sizeof cmd, "%s --cacert %s ls %s 2>&1", cli, path("ca.pem"), base);
    ck_assert_int_eq(td_run(cmd, o, sizeof o), 0);
    ck_assert_msg(strstr(o, "lib"), "%s", o);
    snprintf(cmd, sizeof cmd, "%s ls %s >/dev/null 2>&1; echo $?", cli, base);
    td_run(cmd, o, sizeof o);
    ck_assert_str_ne(o, "0\n");
    stop_clean();
}
END_TEST

START_TEST(test_no_ca_refused)
{
    make_certs();
    start_tls("srv", NULL, NULL);
    unsetenv("TFETCH_CA_FILE");
    tf_client_t *c = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    tf_doc_t *got = NULL;
    char url[128];
    snprintf(url, sizeof url, "%s/v1/tensors/x", base);
    ck_assert_int_eq(tf_get(c, url, 0, &got), TF_ECONNECT);
    ck_assert_msg(strstr(tf_client_last(c)->error, "certificate"), "%s",
                  tf_client_last(c)->error);
    tf_client_free(c);
    stop_clean();
}
END_TEST

/* A certificate the CA signed but that expired, and one nobody signed: refused. */
static void refused_with(const char *name, const char *why)
{
    make_certs();
    start_tls(name, NULL, NULL);
    tf_client_t *c = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_set_ca_file(c, path("ca.pem")), TF_OK);
    tf_doc_t *got = NULL;
    char url[128];
    snprintf(url, sizeof url, "%s/v1/tensors/x", base);
    ck_assert_int_eq(tf_get(c, url, 0, &got), TF_ECONNECT);
    ck_assert_msg(strstr(tf_client_last(c)->error, why), "want '%s' in '%s'", why,
                  tf_client_last(c)->error);
    tf_client_free(c);
    char o[4096], a[256];
    snprintf(a, sizeof a, "--cacert %s", path("ca.pem"));
    ck_assert_int_eq(curl(a, "/v1/info", o, sizeof o), 0);
    stop_clean();
}

START_TEST(test_expired_refused) { refused_with("old", "expired"); }
END_TEST

START_TEST(test_self_signed_refused) { refused_with("self", "self"); }
END_TEST

START_TEST(test_plain_http_refused)
{
    make_certs();
    start_tls("srv", NULL, NULL);
    char cmd[256], o[4096];
    snprintf(cmd, sizeof cmd, "curl -sS --max-time 10 -w '%%{http_code}' %s/v1/info 2>&1; "
             "echo \" rc=$?\"", D.base);             /* D.base: http:// to the TLS port */
    td_run(cmd, o, sizeof o);
    ck_assert_msg(strstr(o, "000") && !strstr(o, "rc=28"), "%s", o);    /* 28: a hang */
    tf_client_t *c = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    tf_client_set_timeout(c, 10000);
    tf_doc_t *got = NULL;
    char url[128];
    snprintf(url, sizeof url, "%s/v1/tensors/x", D.base);
    tf_status_t st = tf_get(c, url, 0, &got);
    ck_assert_msg(st != TF_OK && st != TF_ETIMEDOUT, "%s", tf_err_name(st));
    tf_client_free(c);
    char a[256];
    snprintf(a, sizeof a, "--cacert %s", path("ca.pem"));
    ck_assert_int_eq(curl(a, "/healthz", o, sizeof o), 200);      /* still serving */
    stop_clean();
}
END_TEST

/* Lines of the file at path that contain what, and the sum of the numbers N in its lines
 * "N similar lines suppressed ... (like: ...what...)" into *suppressed. */
static int count_lines(const char *path_, const char *what, long long *suppressed)
{
    FILE *f = fopen(path_, "r");
    ck_assert_msg(f != NULL, "cannot read %s", path_);
    char line[2048];
    int n = 0;
    *suppressed = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, what))
            continue;
        const char *s = strstr(line, " similar lines suppressed");
        const char *p = s;
        while (s && p > line && p[-1] >= '0' && p[-1] <= '9')
            p--;
        if (s && p < s)
            *suppressed += atoll(p);
        else
            n++;
    }
    fclose(f);
    return n;
}

/* Connections to the HTTPS port that never shake hands: each is worth a warning from
 * libmicrohttpd, but the log holds a few of them and a count of the rest, not one each. */
START_TEST(test_handshakeless_flood_logs_a_count)
{
    make_certs();
    start_tls("srv", NULL, NULL);
    const int total = 300;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)D.port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    for (int i = 0; i < total; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
        close(fd);
    }
    char o[4096], a2[256];
    snprintf(a2, sizeof a2, "--cacert %s", path("ca.pem"));
    ck_assert_int_eq(curl(a2, "/healthz", o, sizeof o), 200);      /* still serving */
    /* Stop it and read its log before td_stop (which removes it after a clean exit). */
    ck_assert_int_eq(kill(D.pid, SIGTERM), 0);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "for i in $(seq 200); do grep -q '>stopped' %s && exit 0; "
             "sleep 0.05; done; exit 1", D.log_path);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
    long long suppressed = 0;
    int shown = count_lines(D.log_path, "handshake", &suppressed);
    fprintf(stderr, "%d handshake-less connections: %d lines, %lld counted as suppressed\n",
            total, shown, suppressed);
    ck_assert_msg(shown >= 1 && shown < total / 10, "%d warnings logged for %d connections",
                  shown, total);
    ck_assert_msg(shown + suppressed == total, "%d shown + %lld suppressed != %d", shown,
                  suppressed, total);
    stop_clean();
}
END_TEST

/* Sends this process's stderr to a new file named from tmpl ("...XXXXXX"); returns the old
 * stderr for stderr_back. */
static int stderr_to_tmp(char *tmpl)
{
    int fd = mkstemp(tmpl);
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    int saved = dup(2);
    ck_assert_int_eq(dup2(fd, 2), 2);
    close(fd);
    return saved;
}

static void stderr_back(int saved)
{
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
}

/* The rate limit itself, in this process: one kind's repeats beyond the burst are counted,
 * and written as one line when flushed; another kind is not held back by them. */
START_TEST(test_log_repeats_counted)
{
    char tmpl[] = "/tmp/tfetch-log-XXXXXX";
    int saved = stderr_to_tmp(tmpl);
    for (int i = 0; i < 100; i++) {
        tfd_log(LOG_WARNING, "flood %d from peer", i);
        if (i % 10 == 0)
            tfd_log(LOG_NOTICE, "other kind %d", i);
    }
    tfd_log_flush(0);                           /* the window is not over: nothing */
    tfd_log_flush(1);
    stderr_back(saved);
    long long suppressed = 0;
    int shown = count_lines(tmpl, "flood", &suppressed);
    ck_assert_int_eq(shown, (int)TFD_LOG_BURST);
    ck_assert_int_eq(suppressed, 100 - (int)TFD_LOG_BURST);
    ck_assert_int_eq(count_lines(tmpl, "other kind", &suppressed), 10);
    ck_assert_int_eq(suppressed, 0);
    char cmd[256], o[4096];
    snprintf(cmd, sizeof cmd, "grep -c '^<4>90 similar lines suppressed in [0-9]* s (like: "
             "flood 0 from peer)$' %s", tmpl);
    td_run(cmd, o, sizeof o);
    ck_assert_msg(atoi(o) == 1, "%s", o);
    unlink(tmpl);
}
END_TEST

/* More kinds than the limiter has slots (64), taking turns: some must share a slot, and
 * sharing must not let them start afresh each turn. Every line is printed or counted, and
 * no more than the slots' bursts are printed. */
static const char *const colliding[] = {
    "collide k00 %d",
    "collide k01 %d",
    "collide k02 %d",
    "collide k03 %d",
    "collide k04 %d",
    "collide k05 %d",
    "collide k06 %d",
    "collide k07 %d",
    "collide k08 %d",
    "collide k09 %d",
    "collide k10 %d",
    "collide k11 %d",
    "collide k12 %d",
    "collide k13 %d",
    "collide k14 %d",
    "collide k15 %d",
    "collide k16 %d",
    "collide k17 %d",
    "collide k18 %d",
    "collide k19 %d",
    "collide k20 %d",
    "collide k21 %d",
    "collide k22 %d",
    "collide k23 %d",
    "collide k24 %d",
    "collide k25 %d",
    "collide k26 %d",
    "collide k27 %d",
    "collide k28 %d",
    "collide k29 %d",
    "collide k30 %d",
    "collide k31 %d",
    "collide k32 %d",
    "collide k33 %d",
    "collide k34 %d",
    "collide k35 %d",
    "collide k36 %d",
    "collide k37 %d",
    "collide k38 %d",
    "collide k39 %d",
    "collide k40 %d",
    "collide k41 %d",
    "collide k42 %d",
    "collide k43 %d",
    "collide k44 %d",
    "collide k45 %d",
    "collide k46 %d",
    "collide k47 %d",
    "collide k48 %d",
    "collide k49 %d",
    "collide k50 %d",
    "collide k51 %d",
    "collide k52 %d",
    "collide k53 %d",
    "collide k54 %d",
    "collide k55 %d",
    "collide k56 %d",
    "collide k57 %d",
    "collide k58 %d",
    "collide k59 %d",
    "collide k60 %d",
    "collide k61 %d",
    "collide k62 %d",
    "collide k63 %d",
    "collide k64 %d",
    "collide k65 %d",
    "collide k66 %d",
    "collide k67 %d",
    "collide k68 %d",
    "collide k69 %d",
    "collide k70 %d",
    "collide k71 %d",
    "collide k72 %d",
    "collide k73 %d",
    "collide k74 %d",
    "collide k75 %d",
    "collide k76 %d",
    "collide k77 %d",
    "collide k78 %d",
    "collide k79 %d",
    "collide k80 %d",
    "collide k81 %d",
    "collide k82 %d",
    "collide k83 %d",
    "collide k84 %d",
    "collide k85 %d",
    "collide k86 %d",
    "collide k87 %d",
    "collide k88 %d",
    "collide k89 %d",
    "collide k90 %d",
    "collide k91 %d",
    "collide k92 %d",
    "collide k93 %d",
    "collide k94 %d",
    "collide k95 %d"
};

START_TEST(test_log_colliding_kinds_limited)
{
    char tmpl[] = "/tmp/tfetch-log-XXXXXX";
    int saved = stderr_to_tmp(tmpl);
    const int nk = (int)(sizeof colliding / sizeof colliding[0]), rounds = 30;
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < nk; k++)
            tfd_log(LOG_WARNING, colliding[k], r);
    tfd_log_flush(1);
    stderr_back(saved);
    long long suppressed = 0;
    int shown = count_lines(tmpl, "collide k", &suppressed);
    ck_assert_msg(shown <= 64 * (int)TFD_LOG_BURST, "%d lines printed", shown);
    ck_assert_msg(shown + suppressed == (long long)nk * rounds, "%d shown + %lld counted != %d",
                  shown, suppressed, nk * rounds);
    unlink(tmpl);
}
END_TEST

START_TEST(test_bearer_over_https)
{
    make_certs();
    write_file("tokens", "tk-tls-1 alice read:* write:* admin:*\n");
    start_tls("srv", "--auth-tokens", path("tokens"));
    char o[8192], a[512];
    snprintf(a, sizeof a, "--cacert %s -H 'Authorization: Bearer tk-tls-1'", path("ca.pem"));
    ck_assert_int_eq(curl(a, "/v1/tensors", o, sizeof o), 200);
    snprintf(a, sizeof a, "--cacert %s", path("ca.pem"));
    ck_assert_int_eq(curl(a, "/v1/tensors", o, sizeof o), 401);
    stop_clean();
}
END_TEST

/* ---- client certificates (tls-client-ca) ------------------------------------------------ */

/* The token file of the mTLS tests: alice by her certificate, bob by a token, an admin. */
#define MTLS_TOKENS                                                                        \
    "cert:CN=alice,O=ml alice read:alice.* write:alice.*   # alice's certificate\n"       \
    "tk-bob bob read:bob.* write:bob.*\n"                                                 \
    "tk-adm adm admin:*\n"

/* Starts tfetchd with the server certificate, tls-client-ca ca.pem and the token file. */
static void start_mtls(void)
{
    make_certs();
    make_client_certs();
    write_file("tokens", MTLS_TOKENS);
    const char *args[] = {"--tls-cert", path("srv.pem"), "--tls-key", path("srv.key"),
                          "--tls-client-ca", path("ca.pem"), "--auth-tokens", path("tokens"),
                          NULL};
    ck_assert_msg(td_start(&D, args) == 0, "tfetchd did not start");
    snprintf(base, sizeof base, "https://127.0.0.1:%u", D.port);
}

/* curl's arguments: the CA, client certificate NAME (NULL: none), then more. */
static const char *as(const char *name, const char *more)
{
    static char a[1024];
    int n = snprintf(a, sizeof a, "--cacert %s", path("ca.pem"));
    if (name)
        n += snprintf(a + n, sizeof a - (size_t)n, " --cert %s.pem --key %s.key", path(name),
                      path(name));
    snprintf(a + n, sizeof a - (size_t)n, " %s", more ? more : "");
    return a;
}

#define PUT_ARGS "-X PUT --data-binary abcdefgh -H 'Content-Type: application/octet-stream' " \
                 "-H 'Tfetch-Dtype: F32' -H 'Tfetch-Shape: 2'"

/* tfetch_auth_failures_total{reason="R"}, read with the admin token. */
static long auth_failures(const char *reason)
{
    char o[65536], want[96];
    ck_assert_int_eq(curl(as(NULL, "-H 'Authorization: Bearer tk-adm'"), "/metrics", o, sizeof o),
                     200);
    snprintf(want, sizeof want, "tfetch_auth_failures_total{reason=\"%s\"} ", reason);
    const char *p = strstr(o, want);
    ck_assert_msg(p != NULL, "no %s in %s", want, o);
    return atol(p + strlen(want));
}

/* curl with alice's certificate acts as alice, with alice's rights; a token, when sent,
 * decides instead. */
START_TEST(test_mtls_curl_principal)
{
    start_mtls();
    char o[8192];
    int st = curl(as("alice", PUT_ARGS), "/v1/tensors/alice.w", o, sizeof o);
    ck_assert_msg(st == 201 || st == 200 || st == 204, "%d %s", st, o);
    ck_assert_int_eq(curl(as("alice", "-H 'Accept: application/octet-stream'"),
                          "/v1/tensors/alice.w", o, sizeof o), 200);
    ck_assert_msg(strncmp(o, "abcdefgh", 8) == 0, "%s", o);
    /* outside her prefix: 403 naming her */
    ck_assert_int_eq(curl(as("alice", PUT_ARGS), "/v1/tensors/bob.w", o, sizeof o), 403);
    ck_assert_msg(strstr(o, "principal alice has no write right on 'bob.w'"), "%s", o);
    ck_assert_int_eq(curl(as("alice", NULL), "/v1/tensors", o, sizeof o), 200);
    ck_assert_msg(strstr(o, "alice.w"), "%s", o);
    /* a token decides: alice's certificate with bob's token is bob (no read on alice.*) */
    ck_assert_int_eq(curl(as("alice", "-H 'Authorization: Bearer tk-bob'"),
                          "/v1/tensors/alice.w", o, sizeof o), 403);
    ck_assert_msg(strstr(o, "principal bob has no read right"), "%s", o);
    /* and a bad token is not rescued by the certificate */
    ck_assert_int_eq(curl(as("alice", "-H 'Authorization: Bearer tk-nobody'"),
                          "/v1/tensors/alice.w", o, sizeof o), 401);
    ck_assert_msg(strstr(o, "unknown token"), "%s", o);
    /* a verified certificate without a cert: line: 401, counted like an unknown token */
    long before = auth_failures("unknown");
    ck_assert_int_eq(curl(as("bob", NULL), "/v1/tensors/bob.w", o, sizeof o), 401);
    ck_assert_msg(strstr(o, "no cert: line"), "%s", o);
    ck_assert_int_eq(auth_failures("unknown"), before + 1);
    stop_clean();
}
END_TEST

/* Another CA's certificate with alice's very subject, or her expired one, or the server's
 * own (the right CA, but not a client certificate): never alice. */
START_TEST(test_mtls_other_ca_refused)
{
    start_mtls();
    char o[8192];
    ck_assert_int_eq(curl(as("alice", PUT_ARGS), "/v1/tensors/alice.w", o, sizeof o), 201);
    const char *impostors[] = {"mallory", "alice-old", "srv"};
    for (size_t i = 0; i < sizeof impostors / sizeof *impostors; i++) {
        long before = auth_failures("unknown");
        int st = curl(as(impostors[i], NULL), "/v1/tensors/alice.w", o, sizeof o);
        ck_assert_msg(st == 401 && strstr(o, "does not verify against tls-client-ca"),
                      "%s: %d %s", impostors[i], st, o);
        ck_assert_int_eq(auth_failures("unknown"), before + 1);
    }
    /* no certificate and no token */
    ck_assert_int_eq(curl(as(NULL, NULL), "/v1/tensors/alice.w", o, sizeof o), 401);
    ck_assert_msg(strstr(o, "needs Authorization: Bearer"), "%s", o);
    /* still a token server: bob's token over the same port */
    ck_assert_int_eq(curl(as(NULL, "-H 'Authorization: Bearer tk-bob'"), "/v1/tensors", o,
                          sizeof o), 200);
    stop_clean();
}
END_TEST

/* libtfetch: tf_client_set_cert puts and gets as alice; NULL takes it away (401, on the same
 * client, so a kept connection does not carry it); TFETCH_CERT/TFETCH_KEY; tfetch --cert. */
START_TEST(test_mtls_libtfetch)
{
    start_mtls();
    unsetenv("TFETCH_CERT");
    unsetenv("TFETCH_KEY");
    float v[2] = {5, 6};
    tf_doc_t *in = small_doc(v), *got = NULL;
    char url[128], other[128];
    snprintf(url, sizeof url, "%s/v1/tensors/alice.lib", base);
    snprintf(other, sizeof other, "%s/v1/tensors/bob.lib", base);
    tf_client_t *c = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_set_ca_file(c, path("ca.pem")), TF_OK);
    ck_assert_int_eq(tf_put(c, url, in), TF_EUNAUTH);          /* no certificate yet */
    ck_assert_int_eq(tf_client_set_cert(c, path("none.pem"), path("alice.key")), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_cert(c, path("alice.pem"), path("none.key")), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_cert(c, NULL, path("alice.key")), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_cert(c, path("alice.pem"), path("alice.key")), TF_OK);
    ck_assert_int_eq(tf_put(c, url, in), TF_OK);
    ck_assert_int_eq(tf_get(c, url, 0, &got), TF_OK);
    ck_assert_mem_eq(tf_doc_at(got, 0)->data, v, sizeof v);
    tf_doc_free(got);
    got = NULL;
    ck_assert_int_eq(tf_put(c, other, in), TF_EFORBIDDEN);
    ck_assert_int_eq(tf_client_set_cert(c, NULL, NULL), TF_OK);
    ck_assert_int_eq(tf_get(c, url, 0, &got), TF_EUNAUTH);
    tf_client_free(c);
    /* the environment */
    setenv("TFETCH_CA_FILE", path("ca.pem"), 1);
    setenv("TFETCH_CERT", path("alice.pem"), 1);
    setenv("TFETCH_KEY", path("alice.key"), 1);
    env_good_then_bad(url, "TFETCH_CERT", path("none.pem"));
    unsetenv("TFETCH_CERT");
    unsetenv("TFETCH_KEY");
    unsetenv("TFETCH_CA_FILE");
    tf_doc_free(in);
    /* the CLI */
    const char *cli = getenv("TFETCH_CLI") ? getenv("TFETCH_CLI") : "./cli/tfetch";
    char cmd[1024], o[4096];
    snprintf(cmd, sizeof cmd, "%s --cacert %s --cert %s --key %s ls %s 2>&1", cli, path("ca.pem"),
             path("alice.pem"), path("alice.key"), base);
    ck_assert_int_eq(td_run(cmd, o, sizeof o), 0);
    ck_assert_msg(strstr(o, "alice.lib"), "%s", o);
    snprintf(cmd, sizeof cmd, "%s --cacert %s ls %s 2>&1", cli, path("ca.pem"), base);
    ck_assert_int_ne(td_run(cmd, o, sizeof o), 0);
    ck_assert_msg(strstr(o, "401"), "%s", o);
    stop_clean();
}
END_TEST

/* Revoking a certificate: its cert: line removed and SIGHUP, and it gets 401 from then on. */
START_TEST(test_mtls_revoked_on_sighup)
{
    start_mtls();
    char o[8192], cmd[512];
    ck_assert_int_eq(curl(as("alice", NULL), "/v1/tensors", o, sizeof o), 200);
    /* A kept-alive connection whose certificate was verified once (tfetchd remembers that
     * per connection) is still checked against the cert: lines on every request. */
    tf_client_t *c = NULL;
    char *json = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_set_ca_file(c, path("ca.pem")), TF_OK);
    ck_assert_int_eq(tf_client_set_cert(c, path("alice.pem"), path("alice.key")), TF_OK);
    ck_assert_int_eq(tf_info(c, base, &json), TF_OK);
    free(json);
    json = NULL;
    ck_assert_int_eq(tf_info(c, base, &json), TF_OK);           /* the cached verification */
    free(json);
    json = NULL;
    write_file("tokens", "tk-bob bob read:bob.* write:bob.*\ntk-adm adm admin:*\n");
    kill(D.pid, SIGHUP);
    snprintf(cmd, sizeof cmd, "for i in $(seq 600); do grep -q 'read again: 2 tokens, 0 "
             "certificate subjects' %s && exit 0; sleep 0.05; done; exit 1", D.log_path);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
    ck_assert_int_eq(curl(as("alice", NULL), "/v1/tensors", o, sizeof o), 401);
    ck_assert_msg(strstr(o, "no cert: line"), "%s", o);
    ck_assert_int_eq(tf_info(c, base, &json), TF_EUNAUTH);       /* same client, revoked */
    tf_client_free(c);
    ck_assert_int_eq(curl(as(NULL, "-H 'Authorization: Bearer tk-bob'"), "/v1/tensors", o,
                          sizeof o), 200);
    stop_clean();
}
END_TEST

/* A start that must fail; the daemon's log must hold want. */
static void start_fails(const char *const *args, const char *want)
{
    td_opts_t o = {.args = args, .start_ms = 10000};
    ck_assert_int_ne(td_start_opts(&D, &o), 0);
    char cmd[512], log[4096];
    snprintf(cmd, sizeof cmd, "cat %s", D.log_path);
    td_run(cmd, log, sizeof log);
    ck_assert_msg(strstr(log, want), "want '%s' in: %s", want, log);
    unlink(D.log_path);
}

START_TEST(test_bad_settings_refused_at_start)
{
    make_certs();
    const char *only_cert[] = {"--tls-cert", path("srv.pem"), NULL};
    start_fails(only_cert, "tls-cert is set without tls-key");
    const char *only_key[] = {"--tls-key", path("srv.key"), NULL};
    start_fails(only_key, "tls-key is set without tls-cert");
    const char *missing[] = {"--tls-cert", path("none.pem"), "--tls-key", path("srv.key"), NULL};
    char want[160];
    snprintf(want, sizeof want, "tls-cert %s: No such file", path("none.pem"));
    start_fails(missing, want);
    write_file("junk.pem", "this is not a certificate\n");
    const char *junk[] = {"--tls-cert", path("srv.pem"), "--tls-key", path("junk.pem"), NULL};
    snprintf(want, sizeof want, "tls-key %s: not a PEM file", path("junk.pem"));
    start_fails(junk, want);
    /* PEM armour around garbage, and a key that does not match: MHD refuses, the files named */
    write_file("bad.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
    const char *bad[] = {"--tls-cert", path("bad.pem"), "--tls-key", path("srv.key"), NULL};
    snprintf(want, sizeof want, "tls-cert %s", path("bad.pem"));
    start_fails(bad, want);
    const char *mismatch[] = {"--tls-cert", path("srv.pem"), "--tls-key", path("self.key"), NULL};
    snprintf(want, sizeof want, "tls-cert %s", path("srv.pem"));
    start_fails(mismatch, want);
    /* tls-client-ca: only with HTTPS and a token file, and a readable PEM file */
    write_file("tokens", MTLS_TOKENS);
    const char *ca_alone[] = {"--tls-client-ca", path("ca.pem"), "--auth-tokens", path("tokens"),
                              NULL};
    start_fails(ca_alone, "tls-client-ca is set without tls-cert and tls-key");
    const char *ca_noauth[] = {"--tls-cert", path("srv.pem"), "--tls-key", path("srv.key"),
                               "--tls-client-ca", path("ca.pem"), NULL};
    start_fails(ca_noauth, "tls-client-ca is set without auth-tokens");
    const char *ca_missing[] = {"--tls-cert", path("srv.pem"), "--tls-key", path("srv.key"),
                                "--tls-client-ca", path("none.pem"), "--auth-tokens",
                                path("tokens"), NULL};
    snprintf(want, sizeof want, "tls-client-ca %s: No such file", path("none.pem"));
    start_fails(ca_missing, want);
    const char *ca_junk[] = {"--tls-cert", path("srv.pem"), "--tls-key", path("srv.key"),
                             "--tls-client-ca", path("junk.pem"), "--auth-tokens",
                             path("tokens"), NULL};
    snprintf(want, sizeof want, "tls-client-ca %s: not a PEM file", path("junk.pem"));
    start_fails(ca_junk, want);
    /* a cert: line that does not parse stops the start like a bad token line */
    write_file("tokens", "cert:alice alice read:*\n");
    const char *bad_line[] = {"--tls-cert", path("srv.pem"), "--tls-key", path("srv.key"),
                              "--tls-client-ca", path("ca.pem"), "--auth-tokens",
                              path("tokens"), NULL};
    start_fails(bad_line, "line 1: cert: needs a subject DN");
    cleanup();
}
END_TEST

/* POST /v1/upgrade with curl over https as a client with host identity (boot_id, netns);
 * the answer in o. */
static void ask_upgrade_as(const char *boot_id, const char *netns, char *o, size_t cap)
{
    char a[1024];
    snprintf(a, sizeof a, "--cacert %s -X POST -H 'Content-Type: application/json' "
             "--data '{\"transports\":[\"ucx\"],\"host\":{\"boot_id\":\"%s\","
             "\"netns\":\"%s\",\"pid\":4242},\"policy\":\"auto\"}'",
             path("ca.pem"), boot_id, netns);
    ck_assert_int_eq(curl(a, "/v1/upgrade", o, cap), 200);
}

/* With TLS on, UCX (not encrypted) goes only where nothing crosses an untrusted wire: to a
 * client on this host, or to one whose address is in ucx-trusted. A client at 127.0.0.1 that
 * says it is another host stands in for a remote one. */
START_TEST(test_ucx_trusted_links)
{
    make_certs();
    tfp_up_host_t self;
    tfp_err_t err;
    ck_assert_int_eq(tfx_hostid_get(&self, &err), TFP_OK);
    static const char other_boot[] = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0";
    char o[8192];

    start_tls("srv", NULL, NULL);
    ask_upgrade_as(self.boot_id, self.netns, o, sizeof o);
    ck_assert_msg(strstr(o, "\"token\""), "this host is offered UCX under TLS: %s", o);
    ask_upgrade_as(other_boot, self.netns, o, sizeof o);
    ck_assert_msg(!strstr(o, "\"token\"") &&
                  strstr(o, "TLS is on and UCX is not encrypted: 127.0.0.1 is not on a trusted "
                            "link (ucx-trusted: same-host)"), "%s", o);
    ck_assert_int_eq(td_stop(&D, SIGTERM, 10000), 0);

    /* The operator trusts the loopback range: the "remote" client gets its token. */
    start_tls("srv", "--ucx-trusted", "same-host, 127.0.0.0/8");
    ask_upgrade_as(other_boot, "net:[4026531999]", o, sizeof o);
    ck_assert_msg(strstr(o, "\"token\"") && strstr(o, "\"same_host\":false"), "%s", o);
    char a[256];
    snprintf(a, sizeof a, "--cacert %s", path("ca.pem"));
    ck_assert_int_eq(curl(a, "/v1/info", o, sizeof o), 200);
    ck_assert_msg(strstr(o, "\"trusted\":\"same-host, 127.0.0.0/8\""), "%s", o);
    ck_assert_int_eq(td_stop(&D, SIGTERM, 10000), 0);

    /* A range that does not parse stops the start, naming it. */
    const char *bad[] = {"--tls-cert", path("srv.pem"), "--tls-key", path("srv.key"),
                         "--ucx-trusted", "10.1.2.3/8", NULL};
    start_fails(bad, "ucx-trusted: '10.1.2.3/8' is not same-host, an address or ADDR/PREFIX");
    cleanup();
}
END_TEST

Suite *suite_tls(void)
{
    Suite *s = suite_create("tls");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_curl_round_trip);
    tcase_add_test(tc, test_libtfetch_round_trip);
    tcase_add_test(tc, test_no_ca_refused);
    tcase_add_test(tc, test_expired_refused);
    tcase_add_test(tc, test_self_signed_refused);
    tcase_add_test(tc, test_plain_http_refused);
    tcase_add_test(tc, test_handshakeless_flood_logs_a_count);
    tcase_add_test(tc, test_log_repeats_counted);
    tcase_add_test(tc, test_log_colliding_kinds_limited);
    tcase_add_test(tc, test_bearer_over_https);
    tcase_add_test(tc, test_bad_settings_refused_at_start);
    tcase_add_test(tc, test_mtls_curl_principal);
    tcase_add_test(tc, test_mtls_other_ca_refused);
    tcase_add_test(tc, test_mtls_libtfetch);
    tcase_add_test(tc, test_mtls_revoked_on_sighup);
    suite_add_tcase(s, tc);

    tc = tcase_create("ucxtrust");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_ucx_trusted_links);
    suite_add_tcase(s, tc);
    return s;
}
