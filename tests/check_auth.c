#include "config.h"
#include "tests/suites.h"
#include <check.h>
Suite *suite_authe2e(void)
{
    return suite_create("authe2e");
}
