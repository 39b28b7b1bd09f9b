/* conf.h - tfetchd's settings: embedded defaults, then the config file, then flags.
 *
 * The config file is INI (parsed by inih): `key = value` lines, optionally under a [tfetchd]
 * section, keys spelled like the long flags ("max-body = 1G"). Sizes take K/M/G/T suffixes
 * (powers of 1024). A repeatable key (plugin) collects one value per line; flags of that name
 * replace the file's list. Read at start-up on the main thread, and again on SIGHUP into a
 * new struct: the server applies the settings it can change live (tfd_server_reload) and the
 * running struct stays read-only for the other threads.
 */
#ifndef TFD_CONFIG_H
#define TFD_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include "proto/protover.h"

#define TFD_DEFAULT_PORT 7070
/* $(sysconfdir)/tfetchd/tfetchd.conf: TFD_SYSCONFDIR comes from Makefile.am, so the daemon
 * looks where make install put the file (/etc/tfetchd/tfetchd.conf with --sysconfdir=/etc). */
#define TFD_DEFAULT_CONFIG TFD_SYSCONFDIR "/tfetchd/tfetchd.conf"
#define TFD_MAX_PLUGINS 16

/* A repeatable setting's values, in the order given. */
typedef struct {
    unsigned n;
    char v[TFD_MAX_PLUGINS][512];
} tfd_strlist_t;

typedef struct {
    char listen[64];
    char access_log[256];           /* "off", "stderr" or a file path */
    char auth_tokens[512];          /* the bearer token file; "": authentication off */
    char tls_cert[512];             /* PEM certificate (chain) file; with tls_key: HTTPS */
    char tls_key[512];              /* PEM private key file; "" for both: plain HTTP */
    char ucx_trusted[512];          /* with TLS: who may get UCX in the clear (proto/netaddr.h) */
    char ucx_ports[32];             /* "LO-HI": UCX's TCP listener ports; "": any */
    char tls_client_ca[512];        /* PEM CA file client certificates are verified against;
                                     * "": none asked for */
    char cors_origins[2048];        /* origins browsers may call from, or "*"; "": no CORS */
    char shumai_principal[129];     /* who the Shumai paths are served as; "": refused */
    char store_evict[16];           /* "none" or "lru" */
    unsigned port;
    unsigned threads;
    uint64_t max_body;              /* bytes of one request body */
    uint64_t max_header;            /* bytes of one request's headers */
    uint64_t store_memory;          /* payload bytes the store may hold */
    unsigned max_connections;
    unsigned max_per_ip;
    unsigned idle_timeout;          /* seconds */
    unsigned header_timeout;        /* seconds a request head may take; 0: no deadline */
    uint64_t conn_memory;           /* MHD per-connection memory */
    uint64_t json_max_elems;        /* Accept: application/json refused above this */
    uint64_t max_wait_ms;           /* cap on ?wait= */
    unsigned max_waiters;           /* long-polls suspended at once */
    unsigned drain_timeout;         /* seconds SIGTERM waits for transfers */
    unsigned drain_grace;           /* seconds /readyz says 503 before the drain begins */
    uint64_t body_memory;           /* request bodies held outside the store */
    uint64_t min_upload_rate;       /* bytes/s an upload must keep up in every rate window */
    uint64_t min_download_rate;     /* bytes/s a client must take an answer at, likewise */
    unsigned rate_window;           /* seconds the two rates are averaged over */
    unsigned session_ttl;           /* seconds a session lives unused */
    unsigned max_sessions;
    uint64_t session_user_memory;   /* state bytes per session */
    uint64_t session_memory;        /* state bytes in all sessions */
    unsigned replay_window;         /* seconds answers are kept for retries */
    unsigned replay_entries;
    uint64_t replay_memory;
    unsigned worker_lease_ms;
    unsigned max_workers;
    unsigned worker_queue;          /* calls waiting per worker */
    uint64_t feed_memory;           /* payload bytes all device feeds may hold */
    unsigned max_feeds;             /* device feeds at once */
    unsigned feeds_per_user;        /* device feeds one user id may declare */
    unsigned ucx;                   /* 1: offer the UCX upgrade (when built with UCX) */
    unsigned upgrade_token_ttl_ms;
    unsigned upgrade_tokens_per_client;     /* unused upgrade tokens per principal/address */
    unsigned shm;                   /* 1: offer same-host clients shared memory (shm/memfd) */
    char shm_socket[97];            /* its socket as a file path; "": abstract */
    char shm_socket_group[64];      /* that file's group; "": tfetchd's */
    uint64_t shm_lease_memory;      /* bytes same-host clients may hold mapped at once */
    unsigned shm_lease_ms;          /* a lease ends this long after it opened; 0: never */
    uint64_t shm_ready_memory;      /* regions made ready for same-host PUTs (shmpool.h) */
    int shm_ready_memory_given;
    int log_level;                  /* syslog priority */
    tfd_strlist_t plugins;          /* "PATH [ARGS]" of each plugin, in load order */
    char config_file[512];
    /* Derived, not settings: where store_memory came from ("half of cgroup v2 PATH", "the
     * store-memory setting"), and which of the two sizes a file or flag gave. */
    char store_memory_source[2240];
    unsigned store_memory_given, max_body_given;
    /* The protocol versions served (proto/protover.h): this build's, its minimum raised by
     * the environment's TFETCH_PROTOCOL_MIN (a skew test's planted incompatibility). */
    tfp_proto_range_t protocol;
} tfd_config_t;

void tfd_config_defaults(tfd_config_t *cfg);
/* Applies argv (and the config file it names, or the default one if it exists).
 * Returns 0 to run, 1 when --help/--version was printed (exit 0), -1 on error (printed). */
int tfd_config_load(tfd_config_t *cfg, int argc, char **argv);
/* Calls fn with the name of every setting whose value differs between a and b ("max-body"),
 * in the order --help lists them (SIGHUP: what a reload would change). */
void tfd_config_changed(const tfd_config_t *a, const tfd_config_t *b,
                        void (*fn)(const char *key, void *arg), void *arg);
/* "1G" -> 1073741824. 0 or -1. */
int tfd_parse_size(const char *s, uint64_t *out);

#endif
