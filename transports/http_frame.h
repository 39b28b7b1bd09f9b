/* http_frame.h - the framing check of a request as libmicrohttpd received it: the raw
 * header list (duplicates kept) and the query, with what MHD 0.9.75's parser hides from
 * them (a bare LF, a NUL that cuts a value or the path, an obs-folded line) recovered from
 * where MHD leaves the parsed strings, handed to tfp_http_frame_check (proto/httpframe.h).
 * Also the percent-decoder MHD is given for the path and the query. Used by http_server.c
 * only; MHD's callback threads.
 */
#ifndef TFX_HTTP_FRAME_H
#define TFX_HTTP_FRAME_H

#include <stddef.h>
#include <microhttpd.h>
#include "proto/status.h"

/* On MHD's first callback of a request (url and version as it passed them): TFP_OK, or the
 * refusal (TFP_EBADREQ, TFP_ENOTIMPL, TFP_ETOOBIG, TFP_ENOMEM) with its message in err. */
tfp_status_t tfx_http_frame_check(struct MHD_Connection *conn, const char *url,
                                  const char *version, tfp_err_t *err);

/* MHD_OPTION_UNESCAPE_CALLBACK: tfp_url_unescape, returning the decoded length (so a %00 in
 * a query parameter stays visible), and filling what decoding freed with LF bytes, which
 * cannot occur in a request line, so that tfx_http_frame_check can tell a decoded path from
 * one a NUL cut. */
size_t tfx_http_unescape(void *cls, struct MHD_Connection *conn, char *s);

/* 1 when the layout probes are on (the MHD at run time is 0.9.75, whose buffer layout they
 * read); 0 otherwise, and then bare LF, NUL in values and the path, and obs-fold go unseen. */
int tfx_http_frame_probes(void);

#endif
