/* check_main.c - the test runner: every module's Check suite in one binary.
 *
 * CK_RUN_SUITE=store runs one suite (Check's own variable); CK_FORK=no runs in one process
 * for gdb and valgrind. Exit status is non-zero when any test fails.
 */
#include <stdlib.h>
#include <signal.h>
#include "tests/suites.h"

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    SRunner *sr = srunner_create(suite_status());
    srunner_add_suite(sr, suite_dtype());
    srunner_add_suite(sr, suite_doc());
    srunner_add_suite(sr, suite_safetensors());
    srunner_add_suite(sr, suite_raw());
    srunner_add_suite(sr, suite_jsonview());
    srunner_add_suite(sr, suite_jsonw());
    srunner_add_suite(sr, suite_jsonread());
    srunner_add_suite(sr, suite_ids());
    srunner_add_suite(sr, suite_op());
    srunner_add_suite(sr, suite_utf8());
    srunner_add_suite(sr, suite_base64());
    srunner_add_suite(sr, suite_accesslog());
    srunner_add_suite(sr, suite_store());
    srunner_add_suite(sr, suite_conf());
    srunner_add_suite(sr, suite_metrics());
    srunner_add_suite(sr, suite_http());
    srunner_add_suite(sr, suite_httpframe());
    srunner_add_suite(sr, suite_client());
    srunner_add_suite(sr, suite_shumai());
    srunner_add_suite(sr, suite_async());
    srunner_add_suite(sr, suite_plugins());
    srunner_add_suite(sr, suite_workers());
    srunner_add_suite(sr, suite_ucxframe());
    srunner_add_suite(sr, suite_upgrade());
    srunner_add_suite(sr, suite_digest());
    srunner_add_suite(sr, suite_hostid());
    srunner_add_suite(sr, suite_ucx());
    srunner_add_suite(sr, suite_ucxfault());
    srunner_add_suite(sr, suite_e2e());
    srunner_add_suite(sr, suite_framing());
    srunner_add_suite(sr, suite_conns());
    srunner_add_suite(sr, suite_feeddecl());
    srunner_add_suite(sr, suite_feeds());
    srunner_add_suite(sr, suite_feeds_e2e());
    srunner_add_suite(sr, suite_auth());
    srunner_add_suite(sr, suite_authe2e());
    srunner_add_suite(sr, suite_otokens());
    srunner_add_suite(sr, suite_shm());
    srunner_add_suite(sr, suite_shmframe());
    srunner_add_suite(sr, suite_shme2e());
    srunner_add_suite(sr, suite_xport());
    srunner_add_suite(sr, suite_answer());
    srunner_add_suite(sr, suite_tls());
    srunner_add_suite(sr, suite_driver());
    srunner_add_suite(sr, suite_habits());
    srunner_add_suite(sr, suite_feedclient());
    srunner_add_suite(sr, suite_ucxaddr());
    srunner_add_suite(sr, suite_cond());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
