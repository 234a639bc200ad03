/* Status names and the library version (ffpa.h). Its own file: the registry names a failed probe's
 * status, the front names every failure's; neither calls the other for it. */
#include "ffpa.h"

const char *ffpa_status_string(ffpa_status status)
{
    switch (status) {
    case FFPA_OK:
        return "ok";
    case FFPA_ERR_INVALID_ARGUMENT:
        return "invalid argument";
    case FFPA_ERR_UNSUPPORTED:
        return "unsupported by this backend";
    case FFPA_ERR_NO_BACKEND:
        return "backend unavailable";
    case FFPA_ERR_OUT_OF_MEMORY:
        return "out of memory";
    case FFPA_ERR_DEVICE:
        return "device error";
    case FFPA_ERR_INTERNAL:
        return "internal error";
    }
    return "unknown status";
}

int ffpa_version(void)
{
    return FFPA_VERSION;
}

const char *ffpa_version_string(void)
{
    return FFPA_VERSION_STRING;
}
