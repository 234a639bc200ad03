/* Environment parsing. See env.h. */
#include "env.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *ffpa_env_string(const char *name)
{
    const char *value = getenv(name);
    return value && *value ? value : NULL;
}

int ffpa_env_bool(const char *name, int fallback, int *bad)
{
    static const char *const truthy[] = {"1", "true", "yes", "on"};
    static const char *const falsy[] = {"0", "false", "no", "off"};
    const char *value = ffpa_env_string(name);
    if (!value)
        return fallback;
    for (size_t i = 0; i < sizeof truthy / sizeof *truthy; ++i) {
        if (strcasecmp(value, truthy[i]) == 0)
            return 1;
        if (strcasecmp(value, falsy[i]) == 0)
            return 0;
    }
    if (bad)
        *bad = 1;
    return fallback;
}

long ffpa_env_long(const char *name, long fallback, long lo, long hi, int *bad)
{
    const char *value = ffpa_env_string(name);
    if (!value)
        return fallback;
    char *end = NULL;
    errno = 0;
    long parsed = strtol(value, &end, 10);
    if (errno || end == value || *end != '\0' || parsed < lo || parsed > hi) {
        if (bad)
            *bad = 1;
        return fallback;
    }
    return parsed;
}

int ffpa_path_list_entry(const char *list, int index, char *buf, size_t buf_len)
{
    if (!list || buf_len == 0)
        return 0;
    int seen = 0;
    const char *p = list;
    while (*p) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > 0) {
            if (seen == index) {
                size_t n = len < buf_len - 1 ? len : buf_len - 1;
                memcpy(buf, p, n);
                buf[n] = '\0';
                return 1;
            }
            ++seen;
        }
        if (!end)
            break;
        p = end + 1;
    }
    return 0;
}
