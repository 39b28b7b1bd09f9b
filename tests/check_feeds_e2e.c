/* check_feeds_e2e.c - placeholder; filled below. */
#include "config.h"
#include "tests/suites.h"

Suite *suite_feeds_e2e(void)
{
    return suite_create("feeds_e2e");
}
