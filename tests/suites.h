/* suites.h - every Check suite in the one test runner (tests/check_main.c).
 * Each module's suite lives in its own tests/check_<module>.c.
 */
#ifndef TF_TESTS_SUITES_H
#define TF_TESTS_SUITES_H

#include <check.h>

Suite *suite_status(void);
Suite *suite_dtype(void);
Suite *suite_doc(void);
Suite *suite_safetensors(void);
Suite *suite_raw(void);
Suite *suite_jsonview(void);
Suite *suite_jsonw(void);
Suite *suite_jsonread(void);
Suite *suite_ids(void);
Suite *suite_op(void);
Suite *suite_store(void);
Suite *suite_conf(void);
Suite *suite_metrics(void);
Suite *suite_http(void);
Suite *suite_client(void);
Suite *suite_e2e(void);
Suite *suite_shumai(void);
Suite *suite_async(void);
Suite *suite_plugins(void);
Suite *suite_ucxframe(void);
Suite *suite_upgrade(void);
Suite *suite_digest(void);
Suite *suite_hostid(void);
Suite *suite_ucx(void);
Suite *suite_ucxfault(void);
Suite *suite_utf8(void);
Suite *suite_base64(void);
Suite *suite_accesslog(void);
Suite *suite_httpframe(void);
Suite *suite_framing(void);
Suite *suite_conns(void);
Suite *suite_feeddecl(void);
Suite *suite_feeds(void);
Suite *suite_feeds_e2e(void);
Suite *suite_feedclient(void);
Suite *suite_workers(void);
Suite *suite_auth(void);
Suite *suite_authe2e(void);
Suite *suite_otokens(void);
Suite *suite_shm(void);
Suite *suite_shmframe(void);
Suite *suite_shme2e(void);
Suite *suite_xport(void);
Suite *suite_answer(void);
Suite *suite_tls(void);
Suite *suite_ucxaddr(void);
Suite *suite_driver(void);
Suite *suite_habits(void);
Suite *suite_cond(void);

#endif
