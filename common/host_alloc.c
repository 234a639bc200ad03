/* Failure injection for host allocations (test builds only). See host_alloc.h. */
#include "host_alloc.h"

#include <stdio.h>
#include <string.h>

static char armed[32];
static long count, injected;

int ffpa_alloc_should_fail(void)
{
    const char *v = getenv("FFPA_FAIL_ALLOC");
    if (!v || !*v) {
        armed[0] = '\0';
        return 0;
    }
    if (strcmp(v, armed) != 0) {
        snprintf(armed, sizeof armed, "%s", v);
        count = 0;
    }
    if (++count != atol(v))
        return 0;
    ++injected;
    return 1;
}

long ffpa_alloc_failures_injected(void)
{
    return injected;
}
