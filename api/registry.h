/*
 * The backend registry: the built-in cpu backend and the GPU plugins, each
 * probed once (lazily, thread-safe) and remembered with the reason it is
 * unavailable.
 */
#ifndef FFPA_API_REGISTRY_H
#define FFPA_API_REGISTRY_H

#include <stddef.h>

#include "backend.h"

typedef struct ffpa_registry_entry {
    const char *name;            /* "cpu", "cuda", "hip" */
    const char *plugin_file;     /* shared object name, NULL when built in */
    int is_gpu;
    ffpa_status status;          /* FFPA_OK when usable */
    const ffpa_backend_i *iface; /* valid when status == FFPA_OK */
    ffpa_backend_caps caps;      /* valid when status == FFPA_OK */
    char why[512];               /* why it is unavailable */
} ffpa_registry_entry;

int ffpa_registry_count(void);

/* Entry i, probed; NULL when out of range. */
const ffpa_registry_entry *ffpa_registry_get(int index);

/* Entry by name, probed; NULL when no backend has that name. */
const ffpa_registry_entry *ffpa_registry_find(const char *name);

/* "cpu (available), cuda (unavailable: why), hip (unavailable: why)" for
 * error messages: the available backends first, then the others with their
 * reasons (each cut at 200 characters) when with_reasons. */
void ffpa_registry_describe(char *buf, size_t buf_len, int with_reasons);

#endif
