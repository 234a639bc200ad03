/* A "hip" plugin built for another backend ABI (tests/test_plugin_abi.c):
 * the core must refuse it by name without touching the rest of its table. */
#include "backend.h"

static const ffpa_backend_i table = {
    .abi_version = FFPA_BACKEND_ABI_VERSION + 1000,
    .name = "hip",
};

__attribute__((visibility("default"))) const ffpa_backend_i *ffpa_backend_entry(void);
const ffpa_backend_i *ffpa_backend_entry(void)
{
    return &table;
}
