/* ffpa-tune: the JSON of tuning tables (format: docs/notes/tuning.md). */
#include <stdio.h>
#include <stdlib.h>

#include "tune.h"

const char *tune_path_name(ffpa_kernel_path p)
{
    return p == FFPA_PATH_SMALL_D ? "small-d" : p == FFPA_PATH_SPLIT_D ? "split-d" : "decode";
}

void tune_cfg_to_json(cJSON *obj, const tune_cfg *c, int backward)
{
    static const char *const kernels[] = {"auto", "generic", "sm90"};
    static const char *const dkdv[] = {"auto", "kv64", "kv32", "small", "stream"}; /* ffpa_bwd_dkdv_kernel */
    static const char *const dq[] = {"auto", "big", "small"};
    if (c->family)
        cJSON_AddStringToObject(obj, "kernel", kernels[c->family]);
    if (c->cluster)
        cJSON_AddNumberToObject(obj, "cluster", c->cluster);
    if (c->boxes)
        cJSON_AddNumberToObject(obj, "boxes", c->boxes);
    if (c->br) {
        cJSON_AddNumberToObject(obj, "br", c->br);
        cJSON_AddNumberToObject(obj, "bc", c->bc);
        cJSON_AddNumberToObject(obj, "chunk", c->chunk);
        cJSON_AddNumberToObject(obj, "warps", c->warps);
    }
    if (backward) {
        /* Always both: "auto" keeps a shape's heuristics against a neighbour's choice. */
        cJSON_AddStringToObject(obj, "dkdv", dkdv[c->dkdv]);
        cJSON_AddStringToObject(obj, "dq", dq[c->dq]);
    }
    if (c->stages)
        cJSON_AddNumberToObject(obj, "stages", c->stages);
    if (c->kv_splits)
        cJSON_AddNumberToObject(obj, "kv_splits", c->kv_splits);
}

cJSON *tune_entry_json(const tune_shape *s, int backward, ffpa_kernel_path path, const tune_cfg *c)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "pass", backward ? "bwd" : "fwd");
    cJSON_AddStringToObject(e, "dtype", "bf16");
    cJSON_AddStringToObject(e, "path", tune_path_name(path));
    cJSON_AddBoolToObject(e, "causal", s->causal);
    cJSON_AddBoolToObject(e, "gqa", s->hq != s->hkv);
    cJSON_AddNumberToObject(e, "d", (double)s->d);
    cJSON_AddNumberToObject(e, "nq", (double)s->nq);
    cJSON_AddNumberToObject(e, "nkv", (double)s->nkv);
    tune_cfg_to_json(cJSON_AddObjectToObject(e, "config"), c, backward);
    return e;
}

cJSON *tune_table_json(const char *device, const char *detail, const char *backend)
{
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "format", "ffpa-tuning");
    cJSON_AddNumberToObject(t, "version", 2);
    cJSON_AddStringToObject(t, "backend", backend);
    cJSON_AddStringToObject(t, "device", device);
    cJSON_AddStringToObject(t, "device_detail", detail);
    return t;
}

int tune_write_json(const char *path, const cJSON *root)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return 0;
    int ok = fputs("{\n", f) >= 0;
    for (const cJSON *it = root->child; it && ok; it = it->next) {
        char *key = cJSON_PrintUnformatted(&(cJSON){.type = cJSON_String, .valuestring = it->string});
        ok = key && fprintf(f, "  %s: ", key) > 0;
        free(key);
        if (ok && cJSON_IsArray(it)) {
            ok = fputs("[", f) >= 0;
            for (const cJSON *e = it->child; e && ok; e = e->next) {
                char *text = cJSON_PrintUnformatted(e);
                ok = text && fprintf(f, "\n    %s%s", text, e->next ? "," : "\n  ") > 0;
                free(text);
            }
            ok = ok && fputs("]", f) >= 0;
        } else if (ok) {
            char *text = cJSON_PrintUnformatted(it);
            ok = text && fputs(text, f) >= 0;
            free(text);
        }
        ok = ok && fputs(it->next ? ",\n" : "\n", f) >= 0;
    }
    ok = ok && fputs("}\n", f) >= 0;
    return fclose(f) == 0 && ok;
}
