/* Backend registry and plugin loading. See registry.h. */
#define _GNU_SOURCE /* dladdr */
#include "registry.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "env.h"

#ifndef FFPA_PLUGIN_DIR
#define FFPA_PLUGIN_DIR "/usr/local/lib/ffpa"
#endif

/* Order matters: "auto" takes the first GPU backend that probes OK. */
static ffpa_registry_entry entries[] = {
    {.name = "cuda", .plugin_file = "libffpa-cuda.so", .is_gpu = 1},
    {.name = "hip", .plugin_file = "libffpa-hip.so", .is_gpu = 1},
    {.name = "opencl", .plugin_file = "libffpa-opencl.so", .is_gpu = 1},
    {.name = "cpu", .plugin_file = NULL, .is_gpu = 0},
};
#define N_ENTRIES ((int)(sizeof entries / sizeof entries[0]))

static int probed[N_ENTRIES];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Folder holding libffpa itself, so plugins installed beside it are found. */
static int core_dir(char *buf, size_t len)
{
    Dl_info info;
    char resolved[PATH_MAX];
    if (!dladdr((void *)&ffpa_registry_count, &info) || !info.dli_fname)
        return 0;
    const char *file = realpath(info.dli_fname, resolved) ? resolved : info.dli_fname;
    const char *slash = strrchr(file, '/');
    if (!slash)
        return snprintf(buf, len, ".") > 0;
    size_t n = (size_t)(slash - file);
    if (n >= len)
        return 0;
    memcpy(buf, file, n);
    buf[n] = '\0';
    return 1;
}

/* Fills `path` with the first existing candidate; lists the folders tried. */
static int find_plugin(const ffpa_registry_entry *e, char *path, size_t path_len, char *tried,
                       size_t tried_len)
{
    char dirs[8][512];
    int n = 0;
    const char *env = ffpa_env_string("FFPA_BACKEND_PATH");
    for (int i = 0; n < 4 && ffpa_path_list_entry(env, i, dirs[n], sizeof dirs[n]); ++i)
        ++n;
    char core[400];
    if (core_dir(core, sizeof core)) {
        snprintf(dirs[n++], sizeof dirs[0], "%s", core);            /* beside libffpa */
        snprintf(dirs[n++], sizeof dirs[0], "%s/ffpa", core);       /* <libdir>/ffpa */
        snprintf(dirs[n++], sizeof dirs[0], "%s/backends/%s", core, e->name); /* build tree */
    }
    snprintf(dirs[n++], sizeof dirs[0], "%s", FFPA_PLUGIN_DIR);
    size_t used = 0;
    tried[0] = '\0';
    for (int i = 0; i < n; ++i) {
        snprintf(path, path_len, "%.500s/%.100s", dirs[i], e->plugin_file);
        if (access(path, F_OK) == 0)
            return 1;
        if (used < tried_len)
            used += (size_t)snprintf(tried + used, tried_len - used, "%s%s", i ? ", " : "", dirs[i]);
    }
    return 0;
}

static void probe_entry(ffpa_registry_entry *e)
{
    e->status = FFPA_ERR_NO_BACKEND;
    if (!e->plugin_file) {
        e->iface = ffpa_cpu_backend();
    } else {
        char path[1024], tried[1024];
        if (!find_plugin(e, path, sizeof path, tried, sizeof tried)) {
            snprintf(e->why, sizeof e->why, "%s not found (this build has no %s backend; searched %.400s)",
                     e->plugin_file, e->name, tried);
            return;
        }
        void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            /* Typically the vendor runtime is missing: "libcudart.so.13: cannot open ..." */
            snprintf(e->why, sizeof e->why, "%s", dlerror());
            return;
        }
        ffpa_backend_entry_fn entry =
            (ffpa_backend_entry_fn)(uintptr_t)dlsym(handle, FFPA_BACKEND_ENTRY_SYMBOL);
        if (!entry) {
            snprintf(e->why, sizeof e->why, "%.300s has no %s symbol", path, FFPA_BACKEND_ENTRY_SYMBOL);
            dlclose(handle);
            return;
        }
        e->iface = entry();
        /* The handle stays open for the life of the process: contexts keep
         * function pointers into it. */
    }
    if (!e->iface || e->iface->abi_version != FFPA_BACKEND_ABI_VERSION) {
        /* Nothing else of a table of another ABI can be read safely. */
        snprintf(e->why, sizeof e->why,
                 "%s is built for backend ABI version %u, this libffpa %s expects %u; rebuild or reinstall "
                 "the plugin with this libffpa",
                 e->plugin_file ? e->plugin_file : e->name, e->iface ? e->iface->abi_version : 0u,
                 FFPA_VERSION_STRING, (unsigned)FFPA_BACKEND_ABI_VERSION);
        e->iface = NULL;
        return;
    }
    memset(&e->caps, 0, sizeof e->caps);
    ffpa_status st = e->iface->probe(&e->caps, e->why, sizeof e->why);
    if (st != FFPA_OK) {
        e->status = st == FFPA_ERR_DEVICE ? FFPA_ERR_NO_BACKEND : st;
        if (!e->why[0])
            snprintf(e->why, sizeof e->why, "probe failed: %s", ffpa_status_string(st));
        return;
    }
    e->status = FFPA_OK;
    e->why[0] = '\0';
}

int ffpa_registry_count(void)
{
    return N_ENTRIES;
}

const ffpa_registry_entry *ffpa_registry_get(int index)
{
    if (index < 0 || index >= N_ENTRIES)
        return NULL;
    pthread_mutex_lock(&lock);
    if (!probed[index]) {
        probe_entry(&entries[index]);
        probed[index] = 1;
    }
    pthread_mutex_unlock(&lock);
    return &entries[index];
}

const ffpa_registry_entry *ffpa_registry_find(const char *name)
{
    for (int i = 0; i < N_ENTRIES; ++i)
        if (strcmp(entries[i].name, name) == 0)
            return ffpa_registry_get(i);
    return NULL;
}

void ffpa_registry_describe(char *buf, size_t buf_len, int with_reasons)
{
    size_t used = 0;
    buf[0] = '\0';
    /* The available backends first, and each reason cut short, so a message
     * of bounded length always names what can run (plugins' search paths
     * make the reasons long). */
    for (int pass = 0; pass < 2; ++pass)
        for (int i = 0; i < N_ENTRIES && used < buf_len; ++i) {
            const ffpa_registry_entry *e = ffpa_registry_get(i);
            if ((e->status == FFPA_OK) != (pass == 0))
                continue;
            const char *sep = used ? ", " : "";
            if (e->status == FFPA_OK)
                used += (size_t)snprintf(buf + used, buf_len - used, "%s%s (available)", sep, e->name);
            else if (with_reasons)
                used += (size_t)snprintf(buf + used, buf_len - used, "%s%s (unavailable: %.200s%s)", sep, e->name,
                                         e->why, strlen(e->why) > 200 ? "..." : "");
            else
                used += (size_t)snprintf(buf + used, buf_len - used, "%s%s (unavailable)", sep, e->name);
        }
}
