/* Per-device tuning tables: loading (cJSON) and applying. See tuning.h. */
#include "tuning.h"
#include "host_alloc.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "env.h"

#define TUNING_FORMAT "ffpa-tuning"
#define TUNING_VERSION 2 /* written; version 1 (stages, kv_splits only) is still read */
#define TUNING_MAX_BYTES (16u << 20) /* far above any real table */
#define TUNING_MAX_ENTRIES 100000

typedef struct tuning_entry {
    int backward;
    ffpa_dtype dtype;
    ffpa_kernel_path path; /* the heuristic plan's path the entry was tuned for */
    int causal, gqa;
    double log_d, log_nq, log_nkv;
    /* What config sets; 0 everywhere: keep the heuristic's. */
    int stages;    /* forward ring depth; backward: both kernels' (bwd_stages) */
    int kv_splits;
    ffpa_fwd_family family;   /* forward and backward */
    int cluster;              /* forward; backward with boxes */
    int boxes;                /* Hopper backward width: boxes x cluster */
    int br, bc, chunk, warps; /* generic forward tile (all or none) */
    ffpa_bwd_dkdv_kernel dkdv;
    ffpa_bwd_dq_kernel dq;
} tuning_entry;

struct ffpa_tuning_table {
    ffpa_tuning_table_head head;
    int n_entries;
    tuning_entry *entries;
};

static void warnf(char *warn, size_t warn_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void warnf(char *warn, size_t warn_len, const char *fmt, ...)
{
    if (!warn || !warn_len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(warn, warn_len, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------ apply */

static int64_t ceil_div64(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static const tuning_entry *nearest_entry(const ffpa_tuning_table *t, const ffpa_plan_input *in,
                                         ffpa_kernel_path path)
{
    int64_t d = in->dqk > in->dv ? in->dqk : in->dv;
    double ld = log2((double)d), lq = log2((double)in->nq), lk = log2((double)in->nkv);
    int gqa = in->hq != in->hkv;
    const tuning_entry *best = NULL;
    double best_dist = INFINITY;
    for (int i = 0; i < t->n_entries; ++i) {
        const tuning_entry *e = &t->entries[i];
        if (e->backward != (in->backward != 0) || e->dtype != in->dtype || e->path != path ||
            e->causal != (in->causal != 0) || e->gqa != gqa)
            continue;
        /* D picks the kernel instantiation, so a D step weighs more than a
         * sequence-length step. */
        double dd = e->log_d - ld, dq = e->log_nq - lq, dk = e->log_nkv - lk;
        double dist = 4.0 * dd * dd + dq * dq + dk * dk;
        if (dist < best_dist) {
            best_dist = dist;
            best = e;
        }
    }
    return best;
}

/* Split-KV only where the heuristics chose it (decode shapes, forward, not
 * varlen): clamped to the key blocks, no empty split; 1 leaves split-KV. */
static void apply_kv_splits(const tuning_entry *e, const ffpa_plan_input *in, ffpa_plan *t)
{
    if (e->kv_splits < 1 || t->path != FFPA_PATH_DECODE || in->varlen)
        return;
    int64_t kv_blocks = ceil_div64(in->nkv, t->bc);
    int64_t splits = e->kv_splits < kv_blocks ? e->kv_splits : kv_blocks;
    int64_t per = ceil_div64(kv_blocks, splits);
    splits = ceil_div64(kv_blocks, per);
    t->kv_splits = (int)splits;
    if (splits == 1) {
        int64_t d = in->dqk > in->dv ? in->dqk : in->dv;
        t->path = d <= 256 ? FFPA_PATH_SMALL_D : FFPA_PATH_SPLIT_D;
    }
}

/* The entry's kernel family, both passes: generic anywhere, the Hopper
 * kernels only where hopper_ok (the pass's own conditions). */
static void take_family(const tuning_entry *e, int hopper_ok, ffpa_plan *t)
{
    if (e->family == FFPA_FAMILY_GENERIC || (e->family == FFPA_FAMILY_HOPPER && hopper_ok))
        t->family = e->family;
}

/* Forward choices, each applied only where it is legal for this problem
 * (ignored otherwise): a tile of an instantiation covering Dv; the Hopper
 * family and its cluster size only on sm_90 for non-split-KV calls, a
 * cluster only where one of its instantiations covers D. */
static void apply_forward(const tuning_entry *e, const ffpa_plan_input *in, const ffpa_device_limits *lim,
                          ffpa_plan *t)
{
    if (e->stages >= 2 && e->stages <= 4)
        t->stages = e->stages;
    if (e->br)
        ffpa_plan_use_fwd_tile(in, e->br, e->bc, e->chunk, e->warps, t);
    apply_kv_splits(e, in, t);
    int hopper_ok = lim->arch == 90 && t->kv_splits == 1 && t->path != FFPA_PATH_DECODE;
    take_family(e, hopper_ok, t);
    if (e->cluster && hopper_ok && t->family != FFPA_FAMILY_GENERIC &&
        ffpa_plan_sm90_covers(in->dqk, in->dv, e->cluster))
        t->cluster = e->cluster;
}

/* Backward choices. The generic kernels' are kept as asked (the launcher,
 * bwd_host.h choose_tiles, runs each kernel's choice where it fits shared
 * memory, else its default); the family as the forward's; the Hopper width
 * only on sm_90 where an instantiation of it covers D (the CUDA launcher
 * still takes its default width where the chosen one cannot run a call). */
static void apply_backward(const tuning_entry *e, const ffpa_plan_input *in, const ffpa_device_limits *lim,
                           ffpa_plan *t)
{
    if (e->stages == 2 || e->stages == 3)
        t->bwd_stages = e->stages;
    t->bwd_dkdv = e->dkdv;
    t->bwd_dq = e->dq;
    int hopper_ok = lim->arch == 90;
    take_family(e, hopper_ok, t);
    int cluster = e->cluster ? e->cluster : 1;
    if (e->boxes && hopper_ok && t->family != FFPA_FAMILY_GENERIC &&
        ffpa_plan_sm90_bwd_covers(in->dqk, in->dv, e->boxes, cluster)) {
        t->bwd_boxes = e->boxes;
        t->cluster = cluster;
    }
}

static void tuning_apply_impl(const ffpa_tuning_table *t, const ffpa_plan_input *in,
                              const ffpa_device_limits *lim, ffpa_plan *plan)
{
    if (!lim->is_gpu || in->nq < 1 || in->nkv < 1 || plan->bc < 1 || plan->br < 1)
        return;
    const tuning_entry *e = nearest_entry(t, in, plan->path);
    if (!e)
        return;
    ffpa_plan tuned = *plan;
    if (in->backward)
        apply_backward(e, in, lim, &tuned);
    else
        apply_forward(e, in, lim, &tuned);
    ffpa_plan_derive(in, lim, &tuned);
    if (tuned.smem_bytes > lim->smem_per_block)
        return; /* the entry does not fit this device: keep the heuristics */
    *plan = tuned;
}

/* ------------------------------------------------------------------ load */

static int parse_dtype(const char *s, ffpa_dtype *out)
{
    if (!strcmp(s, "bf16"))
        *out = FFPA_BF16;
    else if (!strcmp(s, "f16"))
        *out = FFPA_F16;
    else if (!strcmp(s, "f32"))
        *out = FFPA_F32;
    else
        return 0;
    return 1;
}

static int parse_path(const char *s, ffpa_kernel_path *out)
{
    if (!strcmp(s, "small-d"))
        *out = FFPA_PATH_SMALL_D;
    else if (!strcmp(s, "split-d"))
        *out = FFPA_PATH_SPLIT_D;
    else if (!strcmp(s, "decode"))
        *out = FFPA_PATH_DECODE;
    else
        return 0;
    return 1;
}

/* An integer member in [lo, hi]; absent: *out = fallback when optional. */
static int get_int(const cJSON *obj, const char *name, int optional, double lo, double hi,
                   double *out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!it) {
        *out = 0;
        return optional;
    }
    if (!cJSON_IsNumber(it))
        return 0;
    double v = it->valuedouble;
    if (!isfinite(v) || v != floor(v) || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

static int get_bool(const cJSON *obj, const char *name, int *out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!cJSON_IsBool(it))
        return 0;
    *out = cJSON_IsTrue(it) ? 1 : 0;
    return 1;
}

static const char *get_string(const cJSON *obj, const char *name)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsString(it) && it->valuestring ? it->valuestring : NULL;
}

/* Member `name`, absent (*out = 0) or one of names[] (*out = its index;
 * names[0] is "auto", the enums' 0); 0 for anything else. */
static int get_choice(const cJSON *obj, const char *name, const char *const *names, int n, int *out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, name);
    *out = 0;
    if (!it)
        return 1;
    if (!cJSON_IsString(it) || !it->valuestring)
        return 0;
    for (int i = 0; i < n; ++i)
        if (!strcmp(it->valuestring, names[i])) {
            *out = i;
            return 1;
        }
    return 0;
}

static const char *const kernel_names[] = {"auto", "generic", "sm90"};  /* ffpa_fwd_family */
static const char *const dkdv_names[] = {"auto", "kv64", "kv32", "small", "stream"}; /* ffpa_bwd_dkdv_kernel */
static const char *const dq_names[] = {"auto", "big", "small"};         /* ffpa_bwd_dq_kernel */
#define N_NAMES(a) ((int)(sizeof a / sizeof a[0]))

/* Whether `key` may appear in a config of this version and pass. */
static int config_member_known(const char *key, int version, int backward)
{
    static const char *const both[] = {"stages", "kv_splits"};
    static const char *const fwd[] = {"kernel", "cluster", "br", "bc", "chunk", "warps"};
    static const char *const bwd[] = {"dkdv", "dq", "kernel", "cluster", "boxes"};
    for (int i = 0; i < N_NAMES(both); ++i)
        if (!strcmp(key, both[i]))
            return 1;
    if (version < 2)
        return 0;
    const char *const *pass = backward ? bwd : fwd;
    int n = backward ? N_NAMES(bwd) : N_NAMES(fwd);
    for (int i = 0; i < n; ++i)
        if (!strcmp(key, pass[i]))
            return 1;
    return 0;
}

/* An entry's config. Numbers out of the kernels' range are kept (apply
 * ignores or clamps them); unknown members and names are malformed. */
static int parse_config(const cJSON *cfg, int version, tuning_entry *e, char *why, size_t why_len)
{
    if (!cJSON_IsObject(cfg))
        return snprintf(why, why_len, "\"config\" is not an object"), 0;
    if (!cfg->child)
        return snprintf(why, why_len, "\"config\" sets nothing"), 0;
    for (const cJSON *it = cfg->child; it; it = it->next)
        if (!it->string || !config_member_known(it->string, version, e->backward))
            return snprintf(why, why_len, "\"config\" has \"%.32s\", unknown to a version %d %s entry",
                            it->string ? it->string : "", version, e->backward ? "bwd" : "fwd"),
                   0;
    double stages, splits, cluster, boxes, tile[4];
    if (!get_int(cfg, "stages", 1, -1e9, 1e9, &stages) || !get_int(cfg, "kv_splits", 1, -1e9, 1e9, &splits))
        return snprintf(why, why_len, "\"config\" has a non-integer \"stages\" or \"kv_splits\""), 0;
    e->stages = (int)stages;
    e->kv_splits = (int)splits;
    int family, dkdv, dq;
    if (!get_choice(cfg, "kernel", kernel_names, N_NAMES(kernel_names), &family))
        return snprintf(why, why_len, "\"kernel\" is not \"auto\", \"generic\" or \"sm90\""), 0;
    if (!get_choice(cfg, "dkdv", dkdv_names, N_NAMES(dkdv_names), &dkdv))
        return snprintf(why, why_len, "\"dkdv\" is not \"auto\", \"kv64\", \"kv32\", \"small\" or \"stream\""), 0;
    if (!get_choice(cfg, "dq", dq_names, N_NAMES(dq_names), &dq))
        return snprintf(why, why_len, "\"dq\" is not \"auto\", \"big\" or \"small\""), 0;
    e->family = (ffpa_fwd_family)family;
    e->dkdv = (ffpa_bwd_dkdv_kernel)dkdv;
    e->dq = (ffpa_bwd_dq_kernel)dq;
    if (!get_int(cfg, "cluster", 1, 1, 4, &cluster))
        return snprintf(why, why_len, "\"cluster\" is not an integer from 1 to 4"), 0;
    if (cluster && e->family == FFPA_FAMILY_GENERIC)
        return snprintf(why, why_len, "\"cluster\" goes with \"kernel\": \"sm90\", not \"generic\""), 0;
    e->cluster = (int)cluster;
    if (!get_int(cfg, "boxes", 1, 1, 64, &boxes))
        return snprintf(why, why_len, "\"boxes\" is not an integer from 1 to 64"), 0;
    if (boxes && e->family == FFPA_FAMILY_GENERIC)
        return snprintf(why, why_len, "\"boxes\" goes with \"kernel\": \"sm90\", not \"generic\""), 0;
    if (e->backward && cluster && !boxes)
        return snprintf(why, why_len, "a bwd \"cluster\" goes with \"boxes\" (the Hopper backward width)"), 0;
    e->boxes = (int)boxes;
    static const char *const tile_names[4] = {"br", "bc", "chunk", "warps"};
    int n_tile = 0;
    for (int i = 0; i < 4; ++i) {
        if (!get_int(cfg, tile_names[i], 1, 1, FFPA_MAX_HEAD_DIM, &tile[i]))
            return snprintf(why, why_len, "\"%s\" is not a positive integer up to %d", tile_names[i],
                            FFPA_MAX_HEAD_DIM),
                   0;
        n_tile += tile[i] != 0;
    }
    if (n_tile != 0 && n_tile != 4)
        return snprintf(why, why_len, "the tile needs all of \"br\", \"bc\", \"chunk\", \"warps\""), 0;
    e->br = (int)tile[0], e->bc = (int)tile[1], e->chunk = (int)tile[2], e->warps = (int)tile[3];
    return 1;
}

/* Entry i; 0 and a reason in why when it is malformed. */
static int parse_entry(const cJSON *obj, int version, tuning_entry *e, char *why, size_t why_len)
{
    memset(e, 0, sizeof *e);
    if (!cJSON_IsObject(obj))
        return snprintf(why, why_len, "is not an object"), 0;
    const char *pass = get_string(obj, "pass");
    if (!pass || (strcmp(pass, "fwd") && strcmp(pass, "bwd")))
        return snprintf(why, why_len, "\"pass\" is not \"fwd\" or \"bwd\""), 0;
    e->backward = !strcmp(pass, "bwd");
    const char *dtype = get_string(obj, "dtype");
    if (!dtype || !parse_dtype(dtype, &e->dtype))
        return snprintf(why, why_len, "\"dtype\" is not \"bf16\", \"f16\" or \"f32\""), 0;
    const char *path = get_string(obj, "path");
    if (!path || !parse_path(path, &e->path))
        return snprintf(why, why_len, "\"path\" is not \"small-d\", \"split-d\" or \"decode\""), 0;
    if (!get_bool(obj, "causal", &e->causal) || !get_bool(obj, "gqa", &e->gqa))
        return snprintf(why, why_len, "\"causal\" or \"gqa\" is not a boolean"), 0;
    double d, nq, nkv;
    if (!get_int(obj, "d", 0, 1, FFPA_MAX_HEAD_DIM, &d) || !get_int(obj, "nq", 0, 1, 1u << 31, &nq) ||
        !get_int(obj, "nkv", 0, 1, 1u << 31, &nkv))
        return snprintf(why, why_len, "\"d\", \"nq\" or \"nkv\" is not a positive integer in range"), 0;
    e->log_d = log2(d), e->log_nq = log2(nq), e->log_nkv = log2(nkv);
    return parse_config(cJSON_GetObjectItemCaseSensitive(obj, "config"), version, e, why, why_len);
}

/* Length of the device name before " (" (the caps add "(sm_90, 132 SMs)"). */
static size_t device_key_len(const char *name)
{
    const char *paren = strstr(name, " (");
    return paren ? (size_t)(paren - name) : strlen(name);
}

static char *read_file(const char *path, size_t *len, char *warn, size_t warn_len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        warnf(warn, warn_len, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = ffpa_host_malloc(TUNING_MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, TUNING_MAX_BYTES + 1, f) : 0;
    int bad = !buf || ferror(f) || n > TUNING_MAX_BYTES;
    fclose(f);
    if (bad) {
        warnf(warn, warn_len, "%s: %s", path,
              !buf ? "out of host memory" : n > TUNING_MAX_BYTES ? "larger than 16 MiB" : "read error");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static ffpa_tuning_table *table_from_json(const cJSON *root, const char *path, const char *device_name,
                                          int arch, const char *backend, char *warn, size_t warn_len)
{
    if (!cJSON_IsObject(root)) {
        warnf(warn, warn_len, "%s: not a JSON object; expected an ffpa tuning table", path);
        return NULL;
    }
    const char *format = get_string(root, "format");
    double version;
    if (!format || strcmp(format, TUNING_FORMAT) || !get_int(root, "version", 0, 1, TUNING_VERSION, &version)) {
        warnf(warn, warn_len,
              "%s: not an ffpa tuning table; expected \"format\": \"%s\", \"version\": 1 to %d", path,
              TUNING_FORMAT, TUNING_VERSION);
        return NULL;
    }
    /* Version 2 holds backend-specific choices (CUDA kernel families): a
     * table of another backend on the same device (hip on an NVIDIA GPU)
     * is none of this backend's business, as if there were no table. */
    const char *table_backend = get_string(root, "backend");
    if (version >= 2 && !table_backend) {
        warnf(warn, warn_len, "%s: no \"backend\"; expected e.g. \"backend\": \"cuda\" in a version 2 table",
              path);
        return NULL;
    }
    if (backend && table_backend && strcmp(backend, table_backend))
        return NULL;
    /* A device's table names the device; an architecture's (measured for
     * parts of that arch without one at hand) names the arch instead. */
    const char *device = get_string(root, "device");
    const cJSON *arch_item = cJSON_GetObjectItemCaseSensitive(root, "arch");
    if (arch_item) {
        double table_arch;
        if (device || !get_int(root, "arch", 0, 1, 1000, &table_arch)) {
            warnf(warn, warn_len, "%s: %s; expected \"arch\": an sm version such as 80, without \"device\"", path,
                  device ? "both \"device\" and \"arch\"" : "\"arch\" is not an sm version");
            return NULL;
        }
        if ((int)table_arch != arch) {
            warnf(warn, warn_len, "%s: table for sm_%d; this device is %s%d", path, (int)table_arch,
                  arch > 0 ? "sm_" : "of no sm version, ", arch);
            return NULL;
        }
    } else {
        size_t want = device_key_len(device_name ? device_name : "");
        if (!device || device_key_len(device) != want || strncmp(device, device_name, want)) {
            warnf(warn, warn_len, "%s: table for device \"%.80s\"; expected \"%.*s\"", path,
                  device ? device : "(none)", (int)(want > 80 ? 80 : want), device_name ? device_name : "");
            return NULL;
        }
    }
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "entries");
    int n = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : -1;
    if (n <= 0 || n > TUNING_MAX_ENTRIES) {
        warnf(warn, warn_len, "%s: %s; expected a non-empty \"entries\" array", path,
              n < 0 ? "no \"entries\" array" : n == 0 ? "\"entries\" is empty" : "too many entries");
        return NULL;
    }
    ffpa_tuning_table *t = ffpa_host_calloc(1, sizeof *t);
    tuning_entry *entries = ffpa_host_calloc((size_t)n, sizeof *entries);
    if (!t || !entries) {
        free(t);
        free(entries);
        warnf(warn, warn_len, "%s: out of host memory", path);
        return NULL;
    }
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, list)
    {
        char why[128];
        if (i >= n || !parse_entry(it, (int)version, &entries[i], why, sizeof why)) {
            warnf(warn, warn_len, "%s: entry %d %s; expected the fields of docs/notes/tuning.md", path, i,
                  i >= n ? "is extra" : why);
            free(entries);
            free(t);
            return NULL;
        }
        ++i;
    }
    t->head.apply = tuning_apply_impl;
    t->n_entries = i;
    t->entries = entries;
    return t;
}

ffpa_tuning_table *ffpa_tuning_load(const char *path, const char *device_name, int arch, const char *backend,
                                    char *warn, size_t warn_len)
{
    if (warn && warn_len)
        warn[0] = '\0';
    if (!path || !device_name) {
        warnf(warn, warn_len, "tuning table: no path or device name");
        return NULL;
    }
    size_t len = 0;
    char *text = read_file(path, &len, warn, warn_len);
    if (!text)
        return NULL;
    /* A NUL byte is binary junk; trailing text after the value is too. */
    const char *end = NULL;
    const char *nul = memchr(text, '\0', len);
    cJSON *root = nul ? NULL : cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
    if (!root) {
        /* cJSON's error pointer is global state: only trusted inside text. */
        const char *at = nul ? nul : cJSON_GetErrorPtr();
        long off = at && at >= text && at <= text + len ? (long)(at - text) : -1;
        warnf(warn, warn_len, "%s: not valid JSON (error near byte %ld); expected an ffpa tuning table",
              path, off);
        free(text);
        return NULL;
    }
    ffpa_tuning_table *t = table_from_json(root, path, device_name, arch, backend, warn, warn_len);
    cJSON_Delete(root);
    free(text);
    return t;
}

void ffpa_tuning_file_name(const char *device_name, char *buf, size_t buf_len)
{
    if (!buf || !buf_len)
        return;
    const char *name = device_name ? device_name : "";
    size_t n = device_key_len(name), o = 0;
    for (size_t i = 0; i < n && o + 6 < buf_len; ++i) {
        char c = name[i];
        int keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                   c == '.' || c == '-' || c == '_';
        buf[o++] = keep ? c : '_';
    }
    buf[o] = '\0';
    if (o + 6 <= buf_len)
        memcpy(buf + o, ".json", 6);
}

int ffpa_tuning_arch_file_name(const char *backend, int arch, char *buf, size_t buf_len)
{
    if (!buf || !buf_len)
        return 0;
    buf[0] = '\0';
    if (!backend || strcmp(backend, "cuda") || arch <= 0)
        return 0;
    const int n = snprintf(buf, buf_len, "cuda-sm_%d.json", arch);
    return n > 0 && (size_t)n < buf_len;
}

ffpa_tuning_table *ffpa_tuning_load_for_device(const char *device_name, int arch, const char *backend,
                                               const char *lib_dir, const char *data_dir, char *warn,
                                               size_t warn_len)
{
    if (warn && warn_len)
        warn[0] = '\0';
    int bad = 0;
    if (!ffpa_env_bool("FFPA_TUNING", 1, &bad)) /* FFPA_TUNING=0: heuristics only */
        return NULL;
    if (bad) { /* a typo is not "on": say so, and take the heuristics */
        if (warn && warn_len)
            snprintf(warn, warn_len, "FFPA_TUNING='%s' is not a boolean; expected 0/1, true/false, yes/no or on/off",
                     ffpa_env_string("FFPA_TUNING"));
        return NULL;
    }
    const char *file = ffpa_env_string("FFPA_TUNING_FILE");
    if (file)
        return ffpa_tuning_load(file, device_name, arch, backend, warn, warn_len);
    /* The device's own table first (measured there), then its arch's. */
    char names[2][200], path[1200];
    ffpa_tuning_file_name(device_name, names[0], sizeof names[0]);
    const int n_names = 1 + ffpa_tuning_arch_file_name(backend, arch, names[1], sizeof names[1]);
    const char *dirs[2] = {lib_dir, data_dir};
    for (int k = 0; k < n_names; ++k)
        for (int i = 0; i < 2; ++i) {
            if (!dirs[i] || !dirs[i][0])
                continue;
            snprintf(path, sizeof path, "%.900s/ffpa/tuning/%.200s", dirs[i], names[k]);
            if (access(path, F_OK) == 0)
                return ffpa_tuning_load(path, device_name, arch, backend, warn, warn_len);
        }
    return NULL;
}

int ffpa_tuning_entry_count(const ffpa_tuning_table *table)
{
    return table ? table->n_entries : 0;
}

void ffpa_tuning_free(ffpa_tuning_table *table)
{
    if (!table)
        return;
    free(table->entries);
    free(table);
}
