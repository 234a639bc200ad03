/*
 * A plugin built for another backend ABI is refused by name: ffpa_create
 * fails with FFPA_ERR_NO_BACKEND and a message naming the plugin, its ABI
 * and this library's version and ABI; ffpa_backend_get_info lists it as
 * unavailable with no version. argv[1]: the folder of the fake plugin.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ffpa.h"

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    setenv("FFPA_BACKEND_PATH", argv[1], 1); /* before the first probe */
    char want[200];
    snprintf(want, sizeof want, "libffpa-hip.so is built for backend ABI version %u, this libffpa %s expects %u",
             FFPA_BACKEND_ABI_VERSION + 1000u, FFPA_VERSION_STRING, (unsigned)FFPA_BACKEND_ABI_VERSION);
    ffpa_context *ctx = NULL;
    ffpa_status st = ffpa_create(&ctx, "hip");
    const char *msg = ffpa_last_error(NULL);
    int fails = 0;
    if (st != FFPA_ERR_NO_BACKEND || !strstr(msg, want)) {
        printf("not ok: ffpa_create(\"hip\") -> %d '%s'; want NO_BACKEND and '%s'\n", (int)st, msg, want);
        ++fails;
    }
    for (int i = 0; i < ffpa_backend_count(); ++i) {
        ffpa_backend_info info;
        if (ffpa_backend_get_info(i, &info) == FFPA_OK && !strcmp(info.name, "hip") &&
            (info.available || info.version[0] || !strstr(info.detail, want))) {
            printf("not ok: hip listed as available %d, version '%s', detail '%s'\n", info.available, info.version,
                   info.detail);
            ++fails;
        }
    }
    if (ffpa_version() != FFPA_VERSION || strcmp(ffpa_version_string(), FFPA_VERSION_STRING) != 0) {
        printf("not ok: library %s (%d), header %s\n", ffpa_version_string(), ffpa_version(), FFPA_VERSION_STRING);
        ++fails;
    }
    printf("%s\n", fails ? "FAIL" : "ok: the other-ABI plugin is refused by name; versions agree");
    return fails ? 1 : 0;
}
