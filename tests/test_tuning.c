/*
 * Unit tests of per-device tuning tables (common/tuning.c) and of how the
 * core uses them (api/ffpa.c): garbage tables give a warning and the
 * heuristics, never a crash; nearest-shape lookup; illegal values ignored
 * or clamped; format version 2 (generic tiles, kernel family, Hopper
 * cluster, backward kernels) applied only where legal; another backend's
 * table ignored quietly; tuned plans keep every planner invariant;
 * FFPA_TUNING=0 and FFPA_TUNING_FILE. Links the static ffpa_common archive
 * and libffpa.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ffpa.h"
#include "plan.h"
#include "tuning.h"

#define DEVICE "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)"

static char tmp_dir[64];

static ffpa_device_limits h100_limits(void)
{
    ffpa_device_limits lim = {0};
    lim.is_gpu = 1;
    lim.arch = 90;
    lim.sm_count = 132;
    lim.warp_size = 32;
    lim.smem_per_block = 232448;
    lim.smem_per_sm = 233472;
    lim.regs_per_sm = 65536;
    lim.max_threads_per_block = 1024;
    return lim;
}

static ffpa_device_limits sm80_limits(void)
{
    ffpa_device_limits lim = h100_limits();
    lim.arch = 80;
    lim.sm_count = 108;
    lim.smem_per_block = 163 * 1024;
    lim.smem_per_sm = 164 * 1024;
    return lim;
}

/* A consumer part: 99 KiB of shared memory per block. */
static ffpa_device_limits sm86_limits(void)
{
    ffpa_device_limits lim = h100_limits();
    lim.arch = 86;
    lim.sm_count = 84;
    lim.smem_per_block = 101376;
    lim.smem_per_sm = 102400;
    return lim;
}

static const char *write_file(const char *name, const void *data, size_t len)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    return path;
}

static const char *write_text(const char *name, const char *text)
{
    return write_file(name, text, strlen(text));
}

/* <tmp_dir>/<lib>/ffpa/tuning/<name> holding text, the folders made as
 * needed: where the core looks for tables beside a libffpa in <lib>.
 * Returns the file's path (the caller copies it to keep it). */
static const char *write_lib_table(const char *lib, const char *name, const char *text)
{
    static char path[600];
    char dir[400];
    const char *levels[] = {"", "/ffpa", "/tuning"};
    snprintf(dir, sizeof dir, "%s/%s", tmp_dir, lib);
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; ++i) {
        strcat(dir, levels[i]);
        assert_true(mkdir(dir, 0700) == 0 || access(dir, F_OK) == 0);
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    return path;
}

/* The text of a table for DEVICE: `head` (the members before "entries",
 * e.g. "\"version\": 2, \"backend\": \"cuda\"") and the entries (JSON array body). */
static const char *table_text(const char *head, const char *entries)
{
    static char text[16384];
    snprintf(text, sizeof text,
             "{\"format\": \"ffpa-tuning\", %s, \"device\": \"NVIDIA H100 80GB HBM3\",\n"
             " \"entries\": [%s]}",
             head, entries);
    return text;
}

#define V1_HEAD "\"version\": 1"
#define V2_HEAD "\"version\": 2, \"backend\": \"cuda\""

static ffpa_tuning_table *table_with(const char *head, const char *entries)
{
    char warn[256];
    ffpa_tuning_table *t =
        ffpa_tuning_load(write_text("table.json", table_text(head, entries)), DEVICE, 90, "cuda", warn, sizeof warn);
    if (!t)
        fail_msg("valid table rejected: %s", warn);
    assert_string_equal(warn, "");
    return t;
}

/* A version 1 table for DEVICE with the given entries. */
static ffpa_tuning_table *table_of(const char *entries)
{
    return table_with(V1_HEAD, entries);
}

/* A version 2 cuda table for DEVICE with the given entries. */
static ffpa_tuning_table *table_v2_of(const char *entries)
{
    return table_with(V2_HEAD, entries);
}

static ffpa_plan_input fwd_input(int64_t d, int64_t nq, int64_t nkv, int causal)
{
    ffpa_plan_input in;
    memset(&in, 0, sizeof in);
    in.dtype = FFPA_BF16;
    in.batch = 1;
    in.hq = in.hkv = 32;
    in.nq = nq;
    in.nkv = nkv;
    in.dqk = in.dv = d;
    in.causal = causal;
    return in;
}

/* Every member of two plans agrees (member by member: the struct's tail
 * padding is not theirs to compare). */
static void assert_same_plan(const ffpa_plan *a, const ffpa_plan *b)
{
    const int ia[] = {a->path, a->br, a->bc, a->dqk_chunk, a->dv_chunk, a->n_qk_chunks, a->n_v_chunks,
                      a->dqk_padded, a->dv_padded, a->stages, a->warps, a->kv_splits, a->order, a->family,
                      a->cluster, a->bwd_boxes, a->bwd_dkdv, a->bwd_dq, a->bwd_stages, a->q_resident};
    const int ib[] = {b->path, b->br, b->bc, b->dqk_chunk, b->dv_chunk, b->n_qk_chunks, b->n_v_chunks,
                      b->dqk_padded, b->dv_padded, b->stages, b->warps, b->kv_splits, b->order, b->family,
                      b->cluster, b->bwd_boxes, b->bwd_dkdv, b->bwd_dq, b->bwd_stages, b->q_resident};
    for (size_t i = 0; i < sizeof ia / sizeof ia[0]; ++i)
        if (ia[i] != ib[i])
            fail_msg("plan member %zu: %d against %d", i, ia[i], ib[i]);
    assert_int_equal(a->smem_bytes, b->smem_bytes);
    assert_int_equal(a->q_blocks, b->q_blocks);
    for (int i = 0; i < 3; ++i)
        assert_int_equal(a->grid[i], b->grid[i]);
}

static ffpa_plan plan_of(const ffpa_plan_input *in, const ffpa_device_limits *lim)
{
    ffpa_plan p;
    memset(&p, 0xAB, sizeof p);
    assert_int_equal(ffpa_plan_make(in, lim, &p), FFPA_OK);
    return p;
}

/* ------------------------------------------------------------ garbage */

static void expect_rejected(const char *path, const char *why_contains)
{
    char warn[512];
    memset(warn, 'x', sizeof warn);
    ffpa_tuning_table *t = ffpa_tuning_load(path, DEVICE, 90, "cuda", warn, sizeof warn);
    if (t)
        fail_msg("%s accepted; expected a warning containing '%s'", path, why_contains);
    assert_non_null(memchr(warn, '\0', sizeof warn));
    if (!strstr(warn, why_contains))
        fail_msg("warning '%s' does not say '%s'", warn, why_contains);
}

static void test_garbage_tables(void **state)
{
    (void)state;
    unsigned char junk[4096];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof junk; ++i) {
        x = x * 1664525u + 1013904223u;
        junk[i] = (unsigned char)(x >> 24);
    }
    expect_rejected(write_file("junk.json", junk, sizeof junk), "not valid JSON");
    expect_rejected(write_file("empty.json", "", 0), "not valid JSON");
    expect_rejected(write_file("nul.json", "{\"format\"\0: 1}", 14), "not valid JSON");
    expect_rejected(write_text("truncated.json",
                               "{\"format\": \"ffpa-tuning\", \"version\": 1, \"device\": \"NVIDIA H100 "
                               "80GB HBM3\", \"entries\": [{\"pass\": \"fwd\", \"dty"),
                    "not valid JSON");
    char deep[3000];
    memset(deep, '[', sizeof deep - 1);
    deep[sizeof deep - 1] = '\0';
    expect_rejected(write_text("deep.json", deep), "not valid JSON");
    expect_rejected(write_text("array.json", "[1, 2, 3]"), "not a JSON object");
    expect_rejected(write_text("null.json", "null"), "not a JSON object");
    expect_rejected(write_text("format.json", "{\"format\": \"other\", \"version\": 1}"),
                    "not an ffpa tuning table");
    expect_rejected(write_text("version.json", "{\"format\": \"ffpa-tuning\", \"version\": 99}"),
                    "not an ffpa tuning table");
    expect_rejected(write_text("vtype.json", "{\"format\": \"ffpa-tuning\", \"version\": \"1\"}"),
                    "not an ffpa tuning table");
    expect_rejected(write_text("other.json", "{\"format\": \"ffpa-tuning\", \"version\": 1, \"device\": "
                                             "\"NVIDIA A100-SXM4-80GB\", \"entries\": []}"),
                    "expected \"NVIDIA H100 80GB HBM3\"");
    expect_rejected(write_text("nodev.json", "{\"format\": \"ffpa-tuning\", \"version\": 1}"),
                    "table for device");
    static const char *head =
        "{\"format\": \"ffpa-tuning\", \"version\": 1, \"device\": \"NVIDIA H100 80GB HBM3\", ";
    static const struct {
        const char *tail, *why;
    } bad[] = {
        {"\"entries\": []}", "\"entries\" is empty"},
        {"\"entries\": {}}", "no \"entries\" array"},
        {"\"entries\": \"many\"}", "no \"entries\" array"},
        {"\"entries\": [{}]}", "entry 0"},
        {"\"entries\": [null]}", "entry 0 is not an object"},
        {"\"entries\": [[1]]}", "entry 0 is not an object"},
        {"\"entries\": [{\"pass\": \"fwd\", \"dtype\": \"bf16\", \"path\": \"split-d\", \"causal\": 0, "
         "\"gqa\": false, \"d\": 512, \"nq\": 8192, \"nkv\": 8192, \"config\": {\"stages\": 3}}]}",
         "boolean"},
        {"\"entries\": [{\"pass\": \"fwd\", \"dtype\": \"bf16\", \"path\": \"split-d\", \"causal\": false, "
         "\"gqa\": false, \"d\": \"512\", \"nq\": 8192, \"nkv\": 8192, \"config\": {\"stages\": 3}}]}",
         "\"d\""},
        {"\"entries\": [{\"pass\": \"fwd\", \"dtype\": \"bf16\", \"path\": \"split-d\", \"causal\": false, "
         "\"gqa\": false, \"d\": 512.5, \"nq\": 8192, \"nkv\": 8192, \"config\": {\"stages\": 3}}]}",
         "\"d\""},
        {"\"entries\": [{\"pass\": \"fwd\", \"dtype\": \"bf16\", \"path\": \"split-d\", \"causal\": false, "
         "\"gqa\": false, \"d\": 4096, \"nq\": 8192, \"nkv\": 8192, \"config\": {\"stages\": 3}}]}",
         "\"d\""},
        {"\"entries\": [{\"pass\": \"fwd\", \"dtype\": \"bf16\", \"path\": \"split-d\", \"causal\": false, "
         "\"gqa\": false, \"d\": 512, \"nq\": 0, \"nkv\": 8192, \"config\": {\"stages\": 3}}]}",
         "\"nq\""},
        {"\"entries\": [{\"pass\": \"fwd\", \"dtype\": \"fp8\", \"path\": \"split-d\", \"causal\": false, "
         "\"gqa\": false, \"d\": 512, \"nq\": 8192, \"nkv\": 8192, \"config\": {\"stages\": 3}}]}",
         "\"dtype\""},
        {"\"entries\": [{\"pass\": \"fwd\", \"dtype\": \"bf16\", \"path\": \"wgmma\", \"causal\": false, "
         "\"gqa\": false, \"d\": 512, \"nq\": 8192, \"nkv\": 8192, \"config\": {\"stages\": 3}}]}",
         "\"path\""},
        {"\"entries\": [{\"pass\": 1, \"dtype\": \"bf16\", \"path\": \"split-d\", \"causal\": false, "
         "\"gqa\": false, \"d\": 512, \"nq\": 8192, \"nkv\": 8192, \"config\": {\"stages\": 3}}]}",
         "\"pass\""},
        {"\"entries\": [{\"pass\": \"fwd\", \"dtype\": \"bf16\", \"path\": \"split-d\", \"causal\": false, "
         "\"gqa\": false, \"d\": 512, \"nq\": 8192, \"nkv\": 8192, \"config\": 3}]}",
         "\"config\""},
        {"\"entries\": [{\"pass\": \"fwd\", \"dtype\": \"bf16\", \"path\": \"split-d\", \"causal\": false, "
         "\"gqa\": false, \"d\": 512, \"nq\": 8192, \"nkv\": 8192, \"config\": {}}]}",
         "sets nothing"},
        {"\"entries\": [{\"pass\": \"fwd\", \"dtype\": \"bf16\", \"path\": \"split-d\", \"causal\": false, "
         "\"gqa\": false, \"d\": 512, \"nq\": 8192, \"nkv\": 8192, \"config\": {\"stages\": \"3\"}}]}",
         "non-integer"},
        {"\"entries\": [{\"pass\": \"fwd\", \"dtype\": \"bf16\", \"path\": \"split-d\", \"causal\": false, "
         "\"gqa\": false, \"d\": 512, \"nq\": 8192, \"nkv\": 8192, \"config\": {\"stages\": 1e300}}]}",
         "non-integer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        char text[1024];
        snprintf(text, sizeof text, "%s%s", head, bad[i].tail);
        expect_rejected(write_text("bad.json", text), bad[i].why);
    }
    char path[300];
    snprintf(path, sizeof path, "%s/does-not-exist.json", tmp_dir);
    expect_rejected(path, "cannot open");
    expect_rejected(tmp_dir, ""); /* a folder: fails to read or parse, no crash */
    /* NULL arguments and a zero-length warning buffer are survivable. */
    assert_null(ffpa_tuning_load(NULL, DEVICE, 90, "cuda", NULL, 0));
    assert_null(ffpa_tuning_load(path, NULL, 90, "cuda", NULL, 0));
    assert_null(ffpa_tuning_load(path, DEVICE, 90, NULL, NULL, 0));
    ffpa_tuning_free(NULL);
    assert_int_equal(ffpa_tuning_entry_count(NULL), 0);
}

static void test_file_name(void **state)
{
    (void)state;
    char buf[64];
    ffpa_tuning_file_name(DEVICE, buf, sizeof buf);
    assert_string_equal(buf, "NVIDIA_H100_80GB_HBM3.json");
    ffpa_tuning_file_name("a/b c:d (x)", buf, sizeof buf);
    assert_string_equal(buf, "a_b_c_d.json");
    ffpa_tuning_file_name("cpu (2 threads)", buf, sizeof buf);
    assert_string_equal(buf, "cpu.json");
    ffpa_tuning_file_name(DEVICE, buf, 8); /* truncated, still terminated */
    assert_true(strlen(buf) < 8);
}

/* ------------------------------------------------------------ lookup */

#define ENTRY_OF(pass, path, causal, d, n, cfg)                                                  \
    "{\"pass\": \"" pass "\", \"dtype\": \"bf16\", \"path\": \"" path "\", \"causal\": " causal      \
    ", \"gqa\": false, \"d\": " #d ", \"nq\": " #n ", \"nkv\": " #n ", \"config\": {" cfg "}}"
#define ENTRY(path, causal, d, n, cfg) ENTRY_OF("fwd", path, causal, d, n, cfg)
#define BWD_ENTRY(path, causal, d, n, cfg) ENTRY_OF("bwd", path, causal, d, n, cfg)

static void test_nearest_shape(void **state)
{
    (void)state;
    ffpa_device_limits lim = h100_limits();
    ffpa_tuning_table *t = table_of(ENTRY("small-d", "false", 128, 1024, "\"stages\": 4") ", "
                                    ENTRY("small-d", "false", 128, 16384, "\"stages\": 3") ", "
                                    ENTRY("split-d", "false", 320, 8192, "\"stages\": 4") ", "
                                    ENTRY("split-d", "false", 1024, 8192, "\"stages\": 2") ", "
                                    ENTRY("split-d", "true", 320, 8192, "\"stages\": 2"));
    assert_int_equal(ffpa_tuning_entry_count(t), 5);
    struct {
        int64_t d, n;
        int causal, want_stages; /* 0: the heuristic's */
    } cases[] = {
        {128, 1024, 0, 4},  {128, 2048, 0, 4}, {128, 8192, 0, 3}, {128, 32768, 0, 3},
        {64, 512, 0, 4},    /* nearest D on the same path */
        /* D = 320's tile fits 2 to 4 stages (the 512-column ones of D = 512
         * and 1024 only 2 on the H100). */
        {320, 8192, 0, 4},  {304, 4096, 0, 4}, {768, 8192, 0, 2}, /* log2 768 is nearer 1024 */
        {1024, 512, 0, 2},  {320, 8192, 1, 2}, {288, 2048, 1, 2},
        {128, 8192, 1, 0}, /* no causal small-d entry */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        ffpa_plan_input in = fwd_input(cases[i].d, cases[i].n, cases[i].n, cases[i].causal);
        ffpa_plan heur = plan_of(&in, &lim);
        in.tuning = t;
        ffpa_plan tuned = plan_of(&in, &lim);
        int want = cases[i].want_stages ? cases[i].want_stages : heur.stages;
        if (tuned.stages != want)
            fail_msg("d %lld n %lld causal %d: stages %d; expected %d", (long long)cases[i].d,
                     (long long)cases[i].n, cases[i].causal, tuned.stages, want);
        assert_int_equal(tuned.smem_bytes, ffpa_plan_smem_bytes(&tuned, in.dtype, 0));
        /* Only tunable fields move. */
        assert_int_equal(tuned.br, heur.br);
        assert_int_equal(tuned.bc, heur.bc);
        assert_int_equal(tuned.dqk_chunk, heur.dqk_chunk);
        assert_int_equal(tuned.warps, heur.warps);
        assert_int_equal(tuned.path, heur.path);
    }
    /* Other dtype, GQA, backward, the cpu: no entry applies. */
    ffpa_plan_input in = fwd_input(512, 8192, 8192, 0);
    in.tuning = t;
    in.dtype = FFPA_F16;
    in.tuning = NULL;
    ffpa_plan heur = plan_of(&in, &lim);
    in.tuning = t;
    assert_int_equal(plan_of(&in, &lim).stages, heur.stages);
    in.dtype = FFPA_BF16;
    in.hkv = 8;
    assert_int_equal(plan_of(&in, &lim).stages, heur.stages);
    ffpa_device_limits cpu = {0};
    cpu.sm_count = 2, cpu.warp_size = 1, cpu.max_threads_per_block = 1;
    in.hkv = 32;
    in.tuning = NULL;
    ffpa_plan cpu_heur = plan_of(&in, &cpu);
    in.tuning = t;
    ffpa_plan cpu_tuned = plan_of(&in, &cpu);
    assert_memory_equal(&cpu_heur, &cpu_tuned, sizeof cpu_heur);
    ffpa_tuning_free(t);
}

/* ------------------------------------------------------------ illegal values */

static void test_illegal_entries(void **state)
{
    (void)state;
    ffpa_device_limits lim = h100_limits();
    ffpa_tuning_table *t = table_of(ENTRY("split-d", "false", 512, 8192, "\"stages\": 9") ", "
                                    ENTRY("split-d", "true", 512, 8192, "\"stages\": 1") ", "
                                    ENTRY("small-d", "false", 128, 8192, "\"stages\": -3, \"kv_splits\": 7"));
    ffpa_plan_input in = fwd_input(512, 8192, 8192, 0);
    ffpa_plan heur = plan_of(&in, &lim);
    in.tuning = t;
    ffpa_plan tuned = plan_of(&in, &lim);
    assert_same_plan(&heur, &tuned); /* stages 9 ignored */
    in = fwd_input(512, 8192, 8192, 1);
    heur = plan_of(&in, &lim);
    in.tuning = t;
    assert_int_equal(plan_of(&in, &lim).stages, heur.stages); /* stages 1 ignored */
    in = fwd_input(128, 8192, 8192, 0);
    heur = plan_of(&in, &lim);
    in.tuning = t;
    tuned = plan_of(&in, &lim);
    assert_same_plan(&heur, &tuned); /* kv_splits outside decode ignored */
    ffpa_tuning_free(t);

    /* Decode: kv_splits 0 ignored, huge clamped to the key blocks, 1 leaves split-KV. */
    const char *decode_entry =
        "{\"pass\": \"fwd\", \"dtype\": \"bf16\", \"path\": \"decode\", \"causal\": false, \"gqa\": "
        "false, \"d\": 512, \"nq\": 1, \"nkv\": 32768, \"config\": {\"kv_splits\": %lld}}";
    long long splits[] = {0, 1000000000LL, 1, 7, -5};
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; ++i) {
        char entry[512];
        snprintf(entry, sizeof entry, decode_entry, splits[i]);
        t = table_of(entry);
        in = fwd_input(512, 1, 32768, 0);
        heur = plan_of(&in, &lim);
        assert_int_equal(heur.path, FFPA_PATH_DECODE);
        in.tuning = t;
        tuned = plan_of(&in, &lim);
        int64_t kv_blocks = (32768 + heur.bc - 1) / heur.bc;
        switch (i) {
        case 0:
        case 4:
            assert_same_plan(&heur, &tuned);
            break;
        case 1:
            assert_int_equal(tuned.kv_splits, kv_blocks);
            break;
        case 2:
            assert_int_equal(tuned.kv_splits, 1);
            assert_int_equal(tuned.path, FFPA_PATH_SPLIT_D);
            break;
        case 3:
            /* 512 key blocks in 7 splits of ceil(512/7) = 74: 7 splits, none empty. */
            assert_int_equal(tuned.kv_splits, 7);
            break;
        }
        assert_int_equal(tuned.grid[0], tuned.q_blocks * tuned.kv_splits);
        if (tuned.kv_splits > 1)
            assert_int_equal(tuned.path, FFPA_PATH_DECODE);
        ffpa_tuning_free(t);
    }

    /* An entry that does not fit the device's shared memory is not applied. */
    t = table_of(ENTRY("split-d", "false", 1024, 8192, "\"stages\": 4"));
    ffpa_device_limits small = sm80_limits();
    in = fwd_input(1024, 8192, 8192, 0);
    heur = plan_of(&in, &small);
    in.tuning = t;
    tuned = plan_of(&in, &small);
    assert_true(ffpa_plan_smem_bytes(&(ffpa_plan){.path = tuned.path, .br = tuned.br, .bc = tuned.bc,
                                                  .dqk_chunk = tuned.dqk_chunk, .dv_chunk = tuned.dv_chunk,
                                                  .dqk_padded = tuned.dqk_padded, .dv_padded = tuned.dv_padded,
                                                  .warps = tuned.warps, .stages = 4, .kv_splits = 1},
                                     in.dtype, 0) > small.smem_per_block);
    assert_same_plan(&heur, &tuned);
    ffpa_tuning_free(t);
}

/* ------------------------------------------------------------ invariants */

/* The tile fields of two plans agree. */
static void assert_same_tile(const ffpa_plan *a, const ffpa_plan *b)
{
    assert_int_equal(a->br, b->br);
    assert_int_equal(a->bc, b->bc);
    assert_int_equal(a->dqk_chunk, b->dqk_chunk);
    assert_int_equal(a->dv_chunk, b->dv_chunk);
    assert_int_equal(a->warps, b->warps);
    assert_int_equal(a->n_qk_chunks, b->n_qk_chunks);
}

typedef void (*tuned_check_fn)(const ffpa_plan_input *in, const ffpa_device_limits *lim, const ffpa_plan *heur,
                               const ffpa_plan *tuned);

/* Plans every problem of the sweep (head dims x sequence lengths x causal,
 * GQA, backward) on each device with table t and without; checks the
 * invariants every plan keeps, then `check`. Problems the heuristics cannot
 * plan (the D = 1024 forward in 99 KiB) are left out. */
static void sweep_tuned_plans(const ffpa_tuning_table *t, const ffpa_device_limits *lims, int n_lims,
                              tuned_check_fn check)
{
    static const int64_t ds[] = {8, 64, 96, 128, 200, 256, 320, 384, 512, 640, 768, 1024};
    static const int64_t ns[][2] = {{1, 1}, {1, 32768}, {4, 4096}, {16, 100000}, {100, 777}, {4096, 4096}};
    for (int l = 0; l < n_lims; ++l)
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; ++di)
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ++ni)
                for (int flags = 0; flags < 8; ++flags) {
                    ffpa_plan_input in = fwd_input(ds[di], ns[ni][0], ns[ni][1], flags & 1);
                    in.hkv = flags & 2 ? 8 : 32;
                    in.backward = (flags & 4) != 0;
                    ffpa_plan heur;
                    if (ffpa_plan_make(&in, &lims[l], &heur) != FFPA_OK)
                        continue;
                    in.tuning = t;
                    ffpa_plan p = plan_of(&in, &lims[l]);
                    assert_true(p.smem_bytes <= lims[l].smem_per_block);
                    assert_int_equal(p.smem_bytes, ffpa_plan_smem_bytes(&p, in.dtype, in.backward));
                    assert_int_equal(p.n_qk_chunks * p.dqk_chunk, p.dqk_padded);
                    assert_int_equal(p.n_v_chunks * p.dv_chunk, p.dv_padded);
                    assert_true(p.dqk_padded >= in.dqk && p.dqk_padded - in.dqk < p.dqk_chunk);
                    assert_true(p.dv_padded >= in.dv && p.dv_padded - in.dv < p.dv_chunk);
                    assert_true(p.kv_splits >= 1);
                    if (p.kv_splits > 1)
                        assert_int_equal(p.path, FFPA_PATH_DECODE);
                    int64_t kv_blocks = (in.nkv + p.bc - 1) / p.bc;
                    assert_true(p.kv_splits <= kv_blocks);
                    /* no empty split */
                    int64_t per = (kv_blocks + p.kv_splits - 1) / p.kv_splits;
                    assert_true((int64_t)(p.kv_splits - 1) * per < kv_blocks);
                    assert_int_equal(p.q_blocks, (in.nq + p.br - 1) / p.br);
                    assert_int_equal(p.grid[0], p.q_blocks * p.kv_splits);
                    assert_int_equal(p.grid[1], in.hq);
                    assert_int_equal(p.grid[2], in.batch);
                    assert_int_equal(p.order, heur.order);
                    check(&in, &lims[l], &heur, &p);
                }
}

/* Version 1 moves nothing but stages and kv_splits. */
static void check_v1_plan(const ffpa_plan_input *in, const ffpa_device_limits *lim, const ffpa_plan *heur,
                          const ffpa_plan *p)
{
    (void)lim;
    assert_true(p->stages == heur->stages || (p->stages >= 2 && p->stages <= 4));
    if (in->backward)
        assert_int_equal(p->kv_splits, heur->kv_splits);
    assert_same_tile(p, heur);
    assert_int_equal(p->dv_padded, heur->dv_padded);
}

static void test_tuned_plans_keep_invariants(void **state)
{
    (void)state;
    char entries[6000] = "";
    static const char *paths[] = {"small-d", "split-d", "decode"};
    static const int dims[] = {64, 256, 512, 1024};
    size_t used = 0;
    int k = 0;
    for (int p = 0; p < 3; ++p)
        for (int c = 0; c < 2; ++c)
            for (int d = 0; d < 4; ++d, ++k)
                used += (size_t)snprintf(entries + used, sizeof entries - used,
                                         "%s{\"pass\": \"%s\", \"dtype\": \"bf16\", \"path\": \"%s\", "
                                         "\"causal\": %s, \"gqa\": %s, \"d\": %d, \"nq\": %d, \"nkv\": "
                                         "4096, \"config\": {\"stages\": %d, \"kv_splits\": %d}}",
                                         k ? ", " : "", k % 5 == 0 ? "bwd" : "fwd", paths[p],
                                         c ? "true" : "false", k % 3 ? "false" : "true", dims[d],
                                         p == 2 ? 1 : 2048, 2 + k % 3, 1 + (k * 37) % 300);
    ffpa_tuning_table *t = table_of(entries);
    ffpa_device_limits lims[2] = {h100_limits(), sm80_limits()};
    sweep_tuned_plans(t, lims, 2, check_v1_plan);
    ffpa_tuning_free(t);
}

/* ------------------------------------------------------------ format version 2 */

static void test_v2_format(void **state)
{
    (void)state;
    ffpa_tuning_table *t = table_v2_of(
        ENTRY("small-d", "false", 128, 8192,
              "\"kernel\": \"generic\", \"br\": 64, \"bc\": 64, \"chunk\": 256, \"warps\": 4, \"stages\": 3") ", "
        ENTRY("split-d", "false", 512, 8192, "\"kernel\": \"sm90\", \"cluster\": 4") ", "
        ENTRY("decode", "false", 512, 1, "\"kernel\": \"auto\", \"kv_splits\": 8, \"stages\": 2") ", "
        BWD_ENTRY("split-d", "true", 512, 4096, "\"dkdv\": \"kv32\", \"dq\": \"small\", \"stages\": 2") ", "
        BWD_ENTRY("small-d", "false", 128, 4096, "\"dkdv\": \"auto\", \"dq\": \"auto\", \"kv_splits\": 3"));
    assert_int_equal(ffpa_tuning_entry_count(t), 5);
    ffpa_tuning_free(t);
    /* Version 1 still loads; its config knows stages and kv_splits only. */
    t = table_of(ENTRY("small-d", "false", 128, 8192, "\"stages\": 3, \"kv_splits\": 2"));
    assert_int_equal(ffpa_tuning_entry_count(t), 1);
    ffpa_tuning_free(t);
    expect_rejected(write_text("v1new.json", table_text(V1_HEAD, ENTRY("small-d", "false", 128, 8192,
                                                                      "\"kernel\": \"generic\""))),
                    "unknown to a version 1 fwd entry");
    /* Version 2 names its backend; later versions are not read. */
    expect_rejected(write_text("v2nobackend.json",
                               table_text("\"version\": 2", ENTRY("small-d", "false", 128, 8192, "\"stages\": 3"))),
                    "no \"backend\"");
    expect_rejected(write_text("v2backend.json", table_text("\"version\": 2, \"backend\": 7",
                                                            ENTRY("small-d", "false", 128, 8192, "\"stages\": 3"))),
                    "no \"backend\"");
    expect_rejected(write_text("v3.json", table_text("\"version\": 3, \"backend\": \"cuda\"",
                                                     ENTRY("small-d", "false", 128, 8192, "\"stages\": 3"))),
                    "not an ffpa tuning table");
}

static void test_malformed_v2_fields(void **state)
{
    (void)state;
#define FWD(cfg) ENTRY("small-d", "false", 128, 8192, cfg)
#define BWD(cfg) BWD_ENTRY("small-d", "false", 128, 4096, cfg)
    /* An entry's config, and what the warning says. */
    static const struct {
        const char *entry, *why;
    } bad[] = {
        {FWD("\"kernel\": \"wgmma\""), "\"kernel\""},
        {FWD("\"kernel\": 1"), "\"kernel\""},
        {FWD("\"kernel\": \"sm90\", \"cluster\": 5"), "\"cluster\""},
        {FWD("\"cluster\": 8"), "\"cluster\""},
        {FWD("\"cluster\": 0"), "\"cluster\""},
        {FWD("\"cluster\": \"2\""), "\"cluster\""},
        {FWD("\"cluster\": 1.5"), "\"cluster\""},
        {FWD("\"kernel\": \"generic\", \"cluster\": 2"), "goes with"},
        {FWD("\"br\": 64"), "tile needs all"},
        {FWD("\"br\": 64, \"bc\": 64, \"chunk\": 64"), "tile needs all"},
        {FWD("\"br\": 0, \"bc\": 64, \"chunk\": 64, \"warps\": 4"), "\"br\""},
        {FWD("\"br\": 64, \"bc\": 64, \"chunk\": 64.5, \"warps\": 4"), "\"chunk\""},
        {FWD("\"br\": 64, \"bc\": 64, \"chunk\": 64, \"warps\": \"4\""), "\"warps\""},
        {FWD("\"br\": 64, \"bc\": 99999, \"chunk\": 64, \"warps\": 4"), "\"bc\""},
        {FWD("\"dkdv\": \"kv32\""), "unknown to a version 2 fwd entry"},
        {FWD("\"dq\": \"big\""), "unknown to a version 2 fwd entry"},
        {FWD("\"boxes\": 4"), "unknown to a version 2 fwd entry"},
        {BWD("\"cluster\": 2"), "goes with \"boxes\""},
        {BWD("\"kernel\": \"generic\", \"boxes\": 4"), "goes with"},
        {BWD("\"kernel\": \"cuda\""), "\"kernel\""},
        {BWD("\"boxes\": 0"), "\"boxes\""},
        {BWD("\"boxes\": 65"), "\"boxes\""},
        {BWD("\"boxes\": \"4\""), "\"boxes\""},
        {BWD("\"boxes\": 4.5"), "\"boxes\""},
        {BWD("\"br\": 64, \"bc\": 64, \"chunk\": 64, \"warps\": 4"), "unknown to a version 2 bwd entry"},
        {BWD("\"dkdv\": \"kv16\""), "\"dkdv\""},
        {BWD("\"dkdv\": null"), "\"dkdv\""},
        {BWD("\"dq\": \"medium\""), "\"dq\""},
        {BWD("\"dq\": [\"big\"]"), "\"dq\""},
        {FWD("\"stage\": 3"), "\"stage\""},
        {FWD(""), "sets nothing"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i)
        expect_rejected(write_text("bad2.json", table_text(V2_HEAD, bad[i].entry)), bad[i].why);
    /* One malformed entry among good ones: the whole table, with one warning. */
    expect_rejected(write_text("bad2.json", table_text(V2_HEAD, FWD("\"stages\": 3") ", " FWD("\"kernel\": \"x\""))),
                    "entry 1");
#undef FWD
#undef BWD
}

/* Plans of one problem with a one-entry version 2 table and without. */
static void plans_with_entry(const char *entry, const ffpa_plan_input *in_heur, const ffpa_device_limits *lim,
                             ffpa_plan *heur, ffpa_plan *tuned)
{
    ffpa_tuning_table *t = table_v2_of(entry);
    ffpa_plan_input in = *in_heur;
    in.tuning = NULL;
    *heur = plan_of(&in, lim);
    in.tuning = t;
    *tuned = plan_of(&in, lim);
    ffpa_tuning_free(t);
    assert_int_equal(tuned->smem_bytes, ffpa_plan_smem_bytes(tuned, in.dtype, in.backward));
    assert_true(tuned->smem_bytes <= lim->smem_per_block);
}

static void test_apply_tile(void **state)
{
    (void)state;
    ffpa_device_limits h100 = h100_limits(), sm86 = sm86_limits();
    ffpa_plan heur, p;
    /* D = 128 on the dv = 256 instantiation: one 256-wide chunk, Q resident. */
    ffpa_plan_input in = fwd_input(128, 8192, 8192, 0);
    plans_with_entry(ENTRY("small-d", "false", 128, 8192,
                           "\"kernel\": \"generic\", \"br\": 64, \"bc\": 64, \"chunk\": 256, \"warps\": 4, "
                           "\"stages\": 3"),
                     &in, &h100, &heur, &p);
    assert_int_equal(heur.br, 128);
    assert_int_equal(heur.dqk_chunk, 128);
    assert_int_equal(p.br, 64);
    assert_int_equal(p.bc, 64);
    assert_int_equal(p.dqk_chunk, 256);
    assert_int_equal(p.dv_chunk, 256);
    assert_int_equal(p.warps, 4);
    assert_int_equal(p.stages, 3);
    assert_int_equal(p.dqk_padded, 256);
    assert_int_equal(p.n_qk_chunks, 1);
    assert_int_equal(p.n_v_chunks, 1);
    assert_int_equal(p.path, FFPA_PATH_SMALL_D);
    assert_true(ffpa_plan_q_resident(&p));
    assert_int_equal(p.family, FFPA_FAMILY_GENERIC);
    assert_int_equal(p.smem_bytes, 64 * 256 * 2 + 3 * 64 * 256 * 2); /* resident Q + ring */
    assert_int_equal(p.q_blocks, 8192 / 64);
    assert_int_equal(p.grid[0], p.q_blocks);

    /* D = 128 on dv = 320 (64-wide chunks): O is staged over all 320
     * columns at the end, more than the main loop needs. */
    plans_with_entry(ENTRY("small-d", "false", 128, 8192, "\"br\": 64, \"bc\": 64, \"chunk\": 64, \"warps\": 4"), &in,
                     &h100, &heur, &p);
    assert_int_equal(p.dqk_chunk, 64);
    assert_int_equal(p.n_qk_chunks, 2);
    assert_int_equal(p.stages, heur.stages);
    assert_int_equal(p.smem_bytes, 64 * 320 * 2);
    assert_int_equal(p.family, FFPA_FAMILY_AUTO);

    /* A tile whose instantiation does not cover D, or that none has: the
     * tile is ignored, the entry's other choices still apply. */
    in = fwd_input(512, 8192, 8192, 0);
    plans_with_entry(ENTRY("split-d", "false", 512, 8192,
                           "\"kernel\": \"generic\", \"br\": 128, \"bc\": 64, \"chunk\": 128, \"warps\": 8"),
                     &in, &h100, &heur, &p);
    assert_same_tile(&p, &heur);
    assert_int_equal(p.smem_bytes, heur.smem_bytes);
    assert_int_equal(p.family, FFPA_FAMILY_GENERIC);
    plans_with_entry(ENTRY("split-d", "false", 512, 8192, "\"br\": 48, \"bc\": 64, \"chunk\": 128, \"warps\": 6"),
                     &in, &h100, &heur, &p);
    assert_same_plan(&p, &heur);

    /* The dv = 1024 tile with a 4-deep ring for D = 64 fits an H100, not a
     * 99 KiB part: there the entry is not applied at all. */
    in = fwd_input(64, 8192, 8192, 0);
    const char *big = ENTRY("small-d", "false", 64, 8192,
                            "\"kernel\": \"generic\", \"br\": 32, \"bc\": 64, \"chunk\": 256, \"warps\": 8, "
                            "\"stages\": 4");
    plans_with_entry(big, &in, &h100, &heur, &p);
    assert_int_equal(p.br, 32);
    assert_int_equal(p.stages, 4);
    assert_int_equal(p.smem_bytes, 32 * 256 * 2 + 4 * 64 * 256 * 2 + 4 * 32 * 64 * 4);
    plans_with_entry(big, &in, &sm86, &heur, &p);
    assert_same_plan(&p, &heur);
}

static void test_fwd_tiles(void **state)
{
    (void)state;
    ffpa_device_limits lim = h100_limits();
    static const struct {
        int64_t dv;
        int n;
    } cases[] = {{64, 11}, {128, 10}, {200, 8}, {256, 8}, {320, 7}, {384, 6}, {512, 6}, {640, 3}, {1024, 3}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        ffpa_fwd_tile tiles[12];
        int n = ffpa_plan_fwd_tiles(cases[c].dv, tiles, 12);
        if (n != cases[c].n)
            fail_msg("dv %lld: %d tiles; expected %d", (long long)cases[c].dv, n, cases[c].n);
        assert_int_equal(ffpa_plan_fwd_tiles(cases[c].dv, tiles, 1), n); /* counts past max */
        n = ffpa_plan_fwd_tiles(cases[c].dv, tiles, 12);
        ffpa_plan_input in = fwd_input(cases[c].dv, 8192, 8192, 0);
        ffpa_plan heur = plan_of(&in, &lim);
        /* The heuristics take the smallest covering instantiation: the first. */
        assert_int_equal(heur.br, tiles[0].br);
        assert_int_equal(heur.dqk_chunk, tiles[0].chunk);
        assert_int_equal(heur.warps, tiles[0].warps);
        for (int i = 0; i < n; ++i) {
            assert_true(tiles[i].dv >= cases[c].dv);
            /* Increasing Dv; at 64 and 128 two tiles (32 and 16 rows per warp)
             * share one, at 512 three (512-, 256- and 128-column slabs), at
             * 1024 three (512- and 256-column slabs, then 32 keys). */
            assert_true(i == 0 || tiles[i].dv > tiles[i - 1].dv ||
                        (tiles[i].dv == tiles[i - 1].dv && tiles[i].br / tiles[i].warps == 16 &&
                         tiles[i - 1].br / tiles[i - 1].warps == 32) ||
                        (tiles[i].dv == tiles[i - 1].dv && tiles[i].br == tiles[i - 1].br &&
                         2 * tiles[i].bc == tiles[i - 1].bc) ||
                        (tiles[i].dv == tiles[i - 1].dv && tiles[i].br == tiles[i - 1].br &&
                         tiles[i].bc == tiles[i - 1].bc && 2 * tiles[i].chunk == tiles[i - 1].chunk));
            char entry[512];
            snprintf(entry, sizeof entry,
                     "{\"pass\": \"fwd\", \"dtype\": \"bf16\", \"path\": \"%s\", \"causal\": false, \"gqa\": false, "
                     "\"d\": %lld, \"nq\": 8192, \"nkv\": 8192, \"config\": {\"br\": %d, \"bc\": %d, \"chunk\": %d, "
                     "\"warps\": %d, \"stages\": 2}}",
                     cases[c].dv > 256 ? "split-d" : "small-d", (long long)cases[c].dv, tiles[i].br, tiles[i].bc,
                     tiles[i].chunk, tiles[i].warps);
            ffpa_plan h, p;
            plans_with_entry(entry, &in, &lim, &h, &p);
            assert_int_equal(p.br, tiles[i].br);
            assert_int_equal(p.bc, tiles[i].bc);
            assert_int_equal(p.dqk_chunk, tiles[i].chunk);
            assert_int_equal(p.warps, tiles[i].warps);
            assert_int_equal(p.path, heur.path);
            /* Staging O takes Br x the instantiation's whole Dv. */
            assert_true(p.smem_bytes >= (size_t)tiles[i].br * (size_t)tiles[i].dv * 2);
        }
    }
    /* Above every instantiation: none. */
    ffpa_fwd_tile one;
    assert_int_equal(ffpa_plan_fwd_tiles(2048, &one, 1), 0);
}

/* Two m-tiles per warp (4 warps a block) at D <= 128 where two blocks fit a
 * multiprocessor's shared memory; on a 100 KiB part the D = 128 tile would
 * leave one block of 4 warps, so the 16-row tile (8 warps) runs there. */
static void test_fwd_tile_per_part(void **state)
{
    (void)state;
    const ffpa_device_limits h100 = h100_limits(), sm80 = sm80_limits(), sm86 = sm86_limits();
    const struct {
        const ffpa_device_limits *lim;
        int64_t d;
        int br, warps, bc;
    } cases[] = {{&h100, 128, 128, 4, 64}, {&sm80, 128, 128, 4, 64}, {&sm86, 128, 128, 8, 64},
                 {&h100, 64, 128, 4, 128}, {&sm86, 64, 128, 4, 128}, {&sm86, 96, 128, 8, 64},
                 {&h100, 256, 64, 4, 64},  {&h100, 1024, 32, 8, 64}, {&sm80, 1024, 32, 8, 64},
                 /* D in (512, 1024] on the 99 KiB parts: the 32-key tile (80 KiB; 64 keys need 128). */
                 {&sm86, 1024, 32, 8, 32}, {&sm86, 768, 32, 8, 32},  {&sm86, 520, 32, 8, 32}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        ffpa_plan_input in = fwd_input(cases[c].d, 8192, 8192, 0);
        ffpa_plan p = plan_of(&in, cases[c].lim);
        if (p.br != cases[c].br || p.warps != cases[c].warps || p.bc != cases[c].bc)
            fail_msg("case %zu (D = %lld): br %d warps %d bc %d; expected %d / %d / %d", c, (long long)cases[c].d,
                     p.br, p.warps, p.bc, cases[c].br, cases[c].warps, cases[c].bc);
        assert_true(p.smem_bytes <= cases[c].lim->smem_per_block);
    }
}

static void test_apply_family_cluster(void **state)
{
    (void)state;
    ffpa_device_limits h100 = h100_limits(), a100 = sm80_limits();
    static const struct {
        const char *cfg;
        int64_t d;
        ffpa_fwd_family h100_family;
        int h100_cluster;
        ffpa_fwd_family a100_family;
    } cases[] = {
        {"\"kernel\": \"sm90\"", 512, FFPA_FAMILY_HOPPER, 0, FFPA_FAMILY_AUTO},
        {"\"kernel\": \"generic\"", 512, FFPA_FAMILY_GENERIC, 0, FFPA_FAMILY_GENERIC},
        {"\"kernel\": \"auto\", \"stages\": 2", 512, FFPA_FAMILY_AUTO, 0, FFPA_FAMILY_AUTO},
        {"\"kernel\": \"sm90\", \"cluster\": 4", 512, FFPA_FAMILY_HOPPER, 4, FFPA_FAMILY_AUTO},
        {"\"kernel\": \"sm90\", \"cluster\": 2", 512, FFPA_FAMILY_HOPPER, 2, FFPA_FAMILY_AUTO},
        {"\"kernel\": \"sm90\", \"cluster\": 1", 512, FFPA_FAMILY_HOPPER, 0, FFPA_FAMILY_AUTO}, /* 320 < 512 */
        {"\"cluster\": 2", 1024, FFPA_FAMILY_AUTO, 0, FFPA_FAMILY_AUTO},                        /* 512 < 1024 */
        {"\"cluster\": 4", 1024, FFPA_FAMILY_AUTO, 4, FFPA_FAMILY_AUTO},
        {"\"cluster\": 3", 768, FFPA_FAMILY_AUTO, 3, FFPA_FAMILY_AUTO},
        {"\"cluster\": 3", 1024, FFPA_FAMILY_AUTO, 0, FFPA_FAMILY_AUTO}, /* 768 < 1024 */
        {"\"cluster\": 1", 320, FFPA_FAMILY_AUTO, 1, FFPA_FAMILY_AUTO},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        char entry[512];
        snprintf(entry, sizeof entry,
                 "{\"pass\": \"fwd\", \"dtype\": \"bf16\", \"path\": \"split-d\", \"causal\": false, \"gqa\": false, "
                 "\"d\": %lld, \"nq\": 8192, \"nkv\": 8192, \"config\": {%s}}",
                 (long long)cases[i].d, cases[i].cfg);
        ffpa_plan_input in = fwd_input(cases[i].d, 8192, 8192, 0);
        ffpa_plan heur, p;
        plans_with_entry(entry, &in, &h100, &heur, &p);
        if (p.family != cases[i].h100_family || p.cluster != cases[i].h100_cluster)
            fail_msg("case %zu (%s, d %lld) on sm_90: family %d cluster %d; expected %d, %d", i, cases[i].cfg,
                     (long long)cases[i].d, p.family, p.cluster, cases[i].h100_family, cases[i].h100_cluster);
        assert_same_tile(&p, &heur); /* the generic tile is the heuristics' */
        plans_with_entry(entry, &in, &a100, &heur, &p);
        assert_int_equal(p.family, cases[i].a100_family);
        assert_int_equal(p.cluster, 0);
    }

    /* Decode: the Hopper kernels do not split KV; leaving split-KV (kv_splits 1) they may run. */
    ffpa_plan_input in = fwd_input(128, 1, 32768, 0);
    ffpa_plan heur, p;
    plans_with_entry("{\"pass\": \"fwd\", \"dtype\": \"bf16\", \"path\": \"decode\", \"causal\": false, \"gqa\": "
                     "false, \"d\": 128, \"nq\": 1, \"nkv\": 32768, \"config\": {\"kernel\": \"sm90\", \"cluster\": 1, "
                     "\"kv_splits\": 8}}",
                     &in, &h100, &heur, &p);
    assert_int_equal(heur.path, FFPA_PATH_DECODE);
    assert_int_equal(p.kv_splits, 8);
    assert_int_equal(p.family, FFPA_FAMILY_AUTO);
    assert_int_equal(p.cluster, 0);
    plans_with_entry("{\"pass\": \"fwd\", \"dtype\": \"bf16\", \"path\": \"decode\", \"causal\": false, \"gqa\": "
                     "false, \"d\": 128, \"nq\": 1, \"nkv\": 32768, \"config\": {\"kernel\": \"sm90\", \"cluster\": 1, "
                     "\"kv_splits\": 1}}",
                     &in, &h100, &heur, &p);
    assert_int_equal(p.kv_splits, 1);
    assert_int_equal(p.path, FFPA_PATH_SMALL_D);
    assert_int_equal(p.family, FFPA_FAMILY_HOPPER);
    assert_int_equal(p.cluster, 1);

    /* The coverage the sm90 launcher's pick follows. */
    assert_true(ffpa_plan_sm90_covers(64, 64, 1));
    assert_true(ffpa_plan_sm90_covers(128, 128, 1));
    assert_true(ffpa_plan_sm90_covers(320, 320, 1));
    assert_false(ffpa_plan_sm90_covers(328, 320, 1));
    assert_true(ffpa_plan_sm90_covers(384, 384, 2));
    assert_true(ffpa_plan_sm90_covers(576, 512, 4));
    assert_true(ffpa_plan_sm90_covers(576, 512, 2)); /* Q/K 320 x 2, V 256 x 2 */
    assert_false(ffpa_plan_sm90_covers(576, 576, 2));
    assert_false(ffpa_plan_sm90_covers(704, 512, 2));
    assert_false(ffpa_plan_sm90_covers(512, 576, 2));
    assert_true(ffpa_plan_sm90_covers(1024, 1024, 4));
    assert_true(ffpa_plan_sm90_covers(768, 768, 3)); /* 256 x 3 */
    assert_true(ffpa_plan_sm90_covers(700, 640, 3));
    assert_false(ffpa_plan_sm90_covers(832, 768, 3));
    assert_false(ffpa_plan_sm90_covers(64, 64, 8));
}

static void test_apply_backward(void **state)
{
    (void)state;
    ffpa_device_limits lim = h100_limits();
    ffpa_tuning_table *t =
        table_v2_of(BWD_ENTRY("split-d", "false", 512, 4096, "\"dkdv\": \"kv32\", \"dq\": \"small\", \"stages\": 2")
                    ", " BWD_ENTRY("small-d", "false", 128, 4096, "\"dkdv\": \"auto\", \"dq\": \"auto\"")
                    ", " BWD_ENTRY("small-d", "true", 128, 4096, "\"stages\": 4, \"dq\": \"big\"")
                    ", " ENTRY("split-d", "false", 512, 4096, "\"kernel\": \"generic\", \"stages\": 2"));
    ffpa_plan_input in = fwd_input(512, 4096, 4096, 0);
    in.backward = 1;
    ffpa_plan heur = plan_of(&in, &lim);
    assert_int_equal(heur.bwd_dkdv, FFPA_BWD_DKDV_AUTO);
    assert_int_equal(heur.bwd_dq, FFPA_BWD_DQ_AUTO);
    assert_int_equal(heur.bwd_stages, 0);
    in.tuning = t;
    ffpa_plan p = plan_of(&in, &lim);
    assert_int_equal(p.bwd_dkdv, FFPA_BWD_DKDV_KV32);
    assert_int_equal(p.bwd_dq, FFPA_BWD_DQ_SMALL);
    assert_int_equal(p.bwd_stages, 2);
    /* Nothing else moves (the backward launcher decides what fits). */
    p.bwd_dkdv = FFPA_BWD_DKDV_AUTO, p.bwd_dq = FFPA_BWD_DQ_AUTO, p.bwd_stages = 0;
    assert_same_plan(&p, &heur);

    in = fwd_input(128, 4096, 4096, 0); /* "auto" everywhere: the heuristics */
    in.backward = 1;
    heur = plan_of(&in, &lim);
    in.tuning = t;
    p = plan_of(&in, &lim);
    assert_same_plan(&p, &heur);

    in.causal = 1; /* a ring depth the kernels lack is ignored */
    in.tuning = NULL;
    heur = plan_of(&in, &lim);
    in.tuning = t;
    p = plan_of(&in, &lim);
    assert_int_equal(p.bwd_stages, 0);
    assert_int_equal(p.bwd_dq, FFPA_BWD_DQ_BIG);
    assert_int_equal(p.stages, heur.stages);

    in = fwd_input(512, 4096, 4096, 0); /* forward entries set no backward choice */
    p = plan_of(&in, &lim);
    in.tuning = t;
    p = plan_of(&in, &lim);
    assert_int_equal(p.family, FFPA_FAMILY_GENERIC);
    assert_int_equal(p.stages, 2); /* the 512-column slabs fit 2 */
    assert_int_equal(p.bwd_dkdv, 0);
    assert_int_equal(p.bwd_dq, 0);
    assert_int_equal(p.bwd_stages, 0);
    ffpa_tuning_free(t);
}

/* The dK/dV choice a one-entry table (split-d, D = 512, N = 4096) gives the
 * backward's plan. */
static int tuned_dkdv(const char *entry)
{
    ffpa_device_limits lim = h100_limits();
    ffpa_tuning_table *t = table_v2_of(entry);
    ffpa_plan_input in = fwd_input(512, 4096, 4096, 0);
    in.backward = 1;
    in.tuning = t;
    ffpa_plan p = plan_of(&in, &lim);
    ffpa_tuning_free(t);
    return p.bwd_dkdv;
}

/* Each dK/dV kernel name a table may give ("kv64", "kv32", "small" and the
 * streaming one, "stream") reaches the plan as its FFPA_BWD_DKDV_ value. */
static void test_apply_backward_dkdv_names(void **state)
{
    (void)state;
    assert_int_equal(tuned_dkdv(BWD_ENTRY("split-d", "false", 512, 4096, "\"dkdv\": \"kv64\"")), FFPA_BWD_DKDV_KV64);
    assert_int_equal(tuned_dkdv(BWD_ENTRY("split-d", "false", 512, 4096, "\"dkdv\": \"kv32\"")), FFPA_BWD_DKDV_KV32);
    assert_int_equal(tuned_dkdv(BWD_ENTRY("split-d", "false", 512, 4096, "\"dkdv\": \"small\"")),
                     FFPA_BWD_DKDV_SMALL);
    assert_int_equal(tuned_dkdv(BWD_ENTRY("split-d", "false", 512, 4096, "\"dkdv\": \"stream\"")),
                     FFPA_BWD_DKDV_STREAM);
}

/* The Hopper backward's family and width (boxes x cluster): only on sm_90,
 * only a width that is instantiated and covers D, never beside "generic". */
static void test_apply_backward_hopper(void **state)
{
    (void)state;
    ffpa_device_limits h100 = h100_limits(), a100 = sm80_limits();
    static const struct {
        const char *cfg;
        int64_t d;
        ffpa_fwd_family family; /* on sm_90 (elsewhere: generic stays, sm90 is dropped) */
        int boxes, cluster;
    } cases[] = {
        {"\"kernel\": \"sm90\", \"boxes\": 4, \"cluster\": 2", 512, FFPA_FAMILY_HOPPER, 4, 2},
        {"\"kernel\": \"sm90\", \"boxes\": 8", 512, FFPA_FAMILY_HOPPER, 8, 1},
        {"\"kernel\": \"sm90\", \"boxes\": 6", 320, FFPA_FAMILY_HOPPER, 6, 1},
        {"\"kernel\": \"sm90\", \"boxes\": 4", 320, FFPA_FAMILY_HOPPER, 0, 0}, /* 256 < 320 */
        {"\"boxes\": 6, \"cluster\": 2", 768, FFPA_FAMILY_AUTO, 6, 2},
        {"\"boxes\": 8, \"cluster\": 2", 1024, FFPA_FAMILY_AUTO, 8, 2},
        {"\"boxes\": 6, \"cluster\": 2", 1024, FFPA_FAMILY_AUTO, 0, 0},         /* 768 < 1024 */
        {"\"boxes\": 2, \"cluster\": 2", 128, FFPA_FAMILY_AUTO, 0, 0},          /* not instantiated */
        {"\"boxes\": 8, \"cluster\": 4", 512, FFPA_FAMILY_AUTO, 0, 0},
        {"\"boxes\": 4, \"cluster\": 3", 768, FFPA_FAMILY_AUTO, 4, 3}, /* a bwd cluster may be 3 */
        {"\"boxes\": 4, \"cluster\": 4", 1024, FFPA_FAMILY_AUTO, 4, 4},
        {"\"boxes\": 4, \"cluster\": 3", 1024, FFPA_FAMILY_AUTO, 0, 0},
        {"\"boxes\": 5", 256, FFPA_FAMILY_AUTO, 0, 0},
        {"\"kernel\": \"generic\", \"dkdv\": \"kv32\"", 512, FFPA_FAMILY_GENERIC, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        char entry[512];
        snprintf(entry, sizeof entry,
                 "{\"pass\": \"bwd\", \"dtype\": \"bf16\", \"path\": \"%s\", \"causal\": false, \"gqa\": "
                 "false, \"d\": %lld, \"nq\": 8192, \"nkv\": 8192, \"config\": {%s}}",
                 cases[i].d > 256 ? "split-d" : "small-d", (long long)cases[i].d, cases[i].cfg);
        ffpa_plan_input in = fwd_input(cases[i].d, 8192, 8192, 0);
        in.backward = 1;
        ffpa_plan heur, p;
        plans_with_entry(entry, &in, &h100, &heur, &p);
        if (p.family != cases[i].family || p.bwd_boxes != cases[i].boxes || p.cluster != cases[i].cluster)
            fail_msg("case %zu (%s, d %lld) on sm_90: family %d boxes %d cluster %d; expected %d, %d, %d", i,
                     cases[i].cfg, (long long)cases[i].d, p.family, p.bwd_boxes, p.cluster, cases[i].family,
                     cases[i].boxes, cases[i].cluster);
        assert_same_tile(&p, &heur);
        plans_with_entry(entry, &in, &a100, &heur, &p);
        assert_int_equal(p.family, cases[i].family == FFPA_FAMILY_GENERIC ? FFPA_FAMILY_GENERIC : FFPA_FAMILY_AUTO);
        assert_int_equal(p.bwd_boxes, 0);
        assert_int_equal(p.cluster, 0);
        /* A backward entry is not the forward's business. */
        in.backward = 0;
        plans_with_entry(entry, &in, &h100, &heur, &p);
        assert_same_plan(&p, &heur);
    }

    /* The widths the sm90 launcher's pick knows (sm90_bwd_inst_*.cu). */
    assert_true(ffpa_plan_sm90_bwd_covers(128, 128, 2, 1));
    assert_true(ffpa_plan_sm90_bwd_covers(320, 256, 6, 1));
    assert_false(ffpa_plan_sm90_bwd_covers(320, 256, 4, 1));
    assert_true(ffpa_plan_sm90_bwd_covers(576, 512, 6, 2));
    assert_false(ffpa_plan_sm90_bwd_covers(576, 512, 4, 2));
    assert_true(ffpa_plan_sm90_bwd_covers(1024, 1024, 8, 2));
    assert_false(ffpa_plan_sm90_bwd_covers(1025, 1024, 8, 2));
    assert_true(ffpa_plan_sm90_bwd_covers(1024, 576, 4, 4));
    assert_true(ffpa_plan_sm90_bwd_covers(768, 576, 4, 3));
    assert_false(ffpa_plan_sm90_bwd_covers(800, 576, 4, 3));
    assert_false(ffpa_plan_sm90_bwd_covers(1088, 1024, 4, 4));
    assert_false(ffpa_plan_sm90_bwd_covers(512, 512, 8, 4));
    assert_false(ffpa_plan_sm90_bwd_covers(64, 64, 2, 2));
    assert_false(ffpa_plan_sm90_bwd_covers(64, 64, 3, 1));
}

/* Version 2: a tile some covering instantiation has, the Hopper family and
 * cluster only where legal, backward choices only on backward plans. */
static void check_v2_plan(const ffpa_plan_input *in, const ffpa_device_limits *lim, const ffpa_plan *heur,
                          const ffpa_plan *p)
{
    if (in->backward) {
        assert_same_tile(p, heur);
        assert_int_equal(p->kv_splits, heur->kv_splits);
        assert_true(p->bwd_stages == 0 || p->bwd_stages == 2 || p->bwd_stages == 3);
        if (p->family == FFPA_FAMILY_HOPPER)
            assert_int_equal(lim->arch, 90);
        if (p->bwd_boxes) {
            assert_int_equal(lim->arch, 90);
            assert_int_not_equal(p->family, FFPA_FAMILY_GENERIC);
            assert_true(ffpa_plan_sm90_bwd_covers(in->dqk, in->dv, p->bwd_boxes, p->cluster));
        } else {
            assert_int_equal(p->cluster, 0);
        }
        return;
    }
    assert_int_equal(p->bwd_boxes, 0);
    assert_int_equal(p->bwd_dkdv, 0);
    assert_int_equal(p->bwd_dq, 0);
    assert_int_equal(p->bwd_stages, 0);
    assert_true(p->stages >= 2 && p->stages <= 4);
    ffpa_fwd_tile legal[12];
    int n = ffpa_plan_fwd_tiles(in->dv, legal, 12), found = 0;
    for (int i = 0; i < n; ++i)
        found |= legal[i].br == p->br && legal[i].bc == p->bc && legal[i].chunk == p->dqk_chunk &&
                 legal[i].warps == p->warps;
    assert_true(found);
    int hopper_ok = lim->arch == 90 && p->kv_splits == 1 && p->path != FFPA_PATH_DECODE;
    if (p->family == FFPA_FAMILY_HOPPER)
        assert_true(hopper_ok);
    if (p->cluster) {
        assert_true(hopper_ok);
        assert_int_not_equal(p->family, FFPA_FAMILY_GENERIC);
        assert_true(ffpa_plan_sm90_covers(in->dqk, in->dv, p->cluster));
    }
}

/* Random version 2 entries over every path: tuned plans keep every invariant. */
static void test_v2_plans_keep_invariants(void **state)
{
    (void)state;
    static const char *paths[] = {"small-d", "split-d", "decode"};
    static const char *kernels[] = {"auto", "generic", "sm90"};
    static const char *dkdv[] = {"auto", "kv64", "kv32", "small", "stream"};
    static const char *dq[] = {"auto", "big", "small"};
    static const int dims[] = {64, 256, 512, 1024};
    static const int tiles[][4] = {{64, 64, 64, 4},  {128, 64, 128, 8}, {64, 64, 256, 4}, {64, 64, 128, 8},
                                   {32, 64, 256, 8}, {48, 64, 64, 4},   {64, 32, 64, 4}};
    static char entries[40000];
    size_t used = 0;
    int k = 0;
    for (int p = 0; p < 3; ++p)
        for (int c = 0; c < 2; ++c)
            for (int d = 0; d < 4; ++d)
                for (int pass = 0; pass < 2; ++pass, ++k) {
                    char cfg[256];
                    if (pass) {
                        int n = snprintf(cfg, sizeof cfg, "\"dkdv\": \"%s\", \"dq\": \"%s\", \"stages\": %d",
                                         dkdv[k % 5], dq[k % 3], 1 + k % 4);
                        int family = (k / 2) % 3, boxes = family == 1 ? 0 : 2 * (1 + k % 5); /* 10: none */
                        n += snprintf(cfg + n, sizeof cfg - (size_t)n, ", \"kernel\": \"%s\"", kernels[family]);
                        if (boxes)
                            snprintf(cfg + n, sizeof cfg - (size_t)n, ", \"boxes\": %d, \"cluster\": %d", boxes,
                                     1 + (k / 3) % 2);
                    } else {
                        const int *tile = tiles[k % 7];
                        int family = k % 3, cluster = family == 1 ? 0 : (int[]){0, 1, 2, 4}[k % 4];
                        int n = snprintf(cfg, sizeof cfg,
                                         "\"kernel\": \"%s\", \"stages\": %d, \"kv_splits\": %d, \"br\": %d, "
                                         "\"bc\": %d, \"chunk\": %d, \"warps\": %d",
                                         kernels[family], 2 + k % 3, 1 + (k * 37) % 300, tile[0], tile[1], tile[2],
                                         tile[3]);
                        if (cluster)
                            snprintf(cfg + n, sizeof cfg - (size_t)n, ", \"cluster\": %d", cluster);
                    }
                    used += (size_t)snprintf(entries + used, sizeof entries - used,
                                             "%s{\"pass\": \"%s\", \"dtype\": \"bf16\", \"path\": \"%s\", "
                                             "\"causal\": %s, \"gqa\": %s, \"d\": %d, \"nq\": %d, \"nkv\": 4096, "
                                             "\"config\": {%s}}",
                                             k ? ", " : "", pass ? "bwd" : "fwd", paths[p], c ? "true" : "false",
                                             k % 3 ? "false" : "true", dims[d], p == 2 ? 1 : 2048, cfg);
                }
    assert_true(used < sizeof entries - 1);
    ffpa_tuning_table *t = table_v2_of(entries);
    ffpa_device_limits lims[3] = {h100_limits(), sm80_limits(), sm86_limits()};
    sweep_tuned_plans(t, lims, 3, check_v2_plan);
    ffpa_tuning_free(t);
}

/* The tables the project ships load for their device and backend, and
 * their plans keep every invariant. */
static void test_shipped_tables(void **state)
{
    (void)state;
    static const struct {
        const char *file, *device;
        int arch;
        const char *backend;
        int entries;
    } shipped[] = {{"NVIDIA_H100_80GB_HBM3.json", "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)", 90, "cuda", 82},
                   {"cuda-sm_80.json", "NVIDIA A100-SXM4-80GB (sm_80, 108 SMs)", 80, "cuda", 84},
                   {"cuda-sm_86.json", "NVIDIA A10 (sm_86, 72 SMs)", 86, "cuda", 82},
                   {"cuda-sm_89.json", "NVIDIA GeForce RTX 4090 (sm_89, 128 SMs)", 89, "cuda", 82}};
    for (size_t i = 0; i < sizeof shipped / sizeof shipped[0]; ++i) {
        char path[1024], warn[256] = "";
        snprintf(path, sizeof path, "%s/%s", FFPA_SHIPPED_TUNING_DIR, shipped[i].file);
        ffpa_tuning_table *t = ffpa_tuning_load(path, shipped[i].device, shipped[i].arch, shipped[i].backend, warn, sizeof warn);
        if (!t)
            fail_msg("%s does not load: %s", path, warn);
        assert_string_equal(warn, "");
        assert_int_equal(ffpa_tuning_entry_count(t), shipped[i].entries);
        ffpa_device_limits lim = shipped[i].arch == 80 ? sm80_limits()
                                 : shipped[i].arch == 90 ? h100_limits()
                                                         : sm86_limits();
        lim.arch = shipped[i].arch;
        sweep_tuned_plans(t, &lim, 1, check_v2_plan);
        ffpa_tuning_free(t);
    }
}

/* ------------------------------------------------------------ the core */

/* Creates a cpu context with stderr captured; returns what it printed. */
static void create_capturing(char *printed, size_t len)
{
    char path[300];
    snprintf(path, sizeof path, "%s/stderr.txt", tmp_dir);
    fflush(stderr);
    int saved = dup(2);
    FILE *f = fopen(path, "w+");
    assert_non_null(f);
    dup2(fileno(f), 2);
    ffpa_context *ctx = NULL;
    ffpa_status st = ffpa_create(&ctx, "cpu");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    assert_int_equal(st, FFPA_OK);
    /* The context still computes (heuristic plans). */
    float q[4 * 8], o[4 * 8];
    for (int i = 0; i < 32; ++i)
        q[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
    ffpa_tensor tq = ffpa_tensor_bhnd(q, FFPA_F32, 1, 1, 4, 8);
    ffpa_tensor to = ffpa_tensor_bhnd(o, FFPA_F32, 1, 1, 4, 8);
    assert_int_equal(ffpa_forward(ctx, &tq, &tq, &tq, &to, NULL, NULL), FFPA_OK);
    ffpa_destroy(ctx);
    rewind(f);
    size_t n = fread(printed, 1, len - 1, f);
    printed[n] = '\0';
    fclose(f);
}

static void test_core_env(void **state)
{
    (void)state;
    char printed[2048];
    const char *junk = write_text("junk-env.json", "{\"format\": \"ffpa-tuning\", \"vers");
    setenv("FFPA_TUNING_FILE", junk, 1);
    unsetenv("FFPA_TUNING");
    create_capturing(printed, sizeof printed);
    assert_non_null(strstr(printed, "warning: tuning table ignored"));
    assert_non_null(strstr(printed, "junk-env.json"));
    /* Once per context, not per call. */
    assert_null(strstr(strstr(printed, "warning") + 1, "warning"));

    setenv("FFPA_TUNING", "0", 1);
    create_capturing(printed, sizeof printed);
    assert_string_equal(printed, "");

    /* Not a boolean: a warning naming the variable, and the heuristics (never silently on). */
    setenv("FFPA_TUNING", "maybe", 1);
    create_capturing(printed, sizeof printed);
    assert_non_null(strstr(printed, "FFPA_TUNING='maybe' is not a boolean"));

    /* A valid table for this device: no warning. */
    unsetenv("FFPA_TUNING");
    const char *ok = write_text(
        "cpu.json", "{\"format\": \"ffpa-tuning\", \"version\": 1, \"device\": \"cpu\", \"entries\": ["
                    ENTRY("small-d", "false", 64, 64, "\"stages\": 3") "]}");
    setenv("FFPA_TUNING_FILE", ok, 1);
    create_capturing(printed, sizeof printed);
    assert_string_equal(printed, "");

    /* Another device's table named by FFPA_TUNING_FILE is refused with a warning. */
    const char *other = write_text(
        "other-env.json", "{\"format\": \"ffpa-tuning\", \"version\": 1, \"device\": \"NVIDIA H100 80GB "
                          "HBM3\", \"entries\": [" ENTRY("small-d", "false", 64, 64, "\"stages\": 3") "]}");
    setenv("FFPA_TUNING_FILE", other, 1);
    create_capturing(printed, sizeof printed);
    assert_non_null(strstr(printed, "table for device"));

    /* A missing named file warns; no FFPA_TUNING_FILE and no table for the device is silent. */
    char missing[300];
    snprintf(missing, sizeof missing, "%s/missing.json", tmp_dir);
    setenv("FFPA_TUNING_FILE", missing, 1);
    create_capturing(printed, sizeof printed);
    assert_non_null(strstr(printed, "cannot open"));
    unsetenv("FFPA_TUNING_FILE");
    create_capturing(printed, sizeof printed);
    assert_string_equal(printed, "");

    /* The search through folders: <lib>/ffpa/tuning/<device>.json. */
    char warn[256], cmd_dir[320], file[600];
    snprintf(cmd_dir, sizeof cmd_dir, "%s/lib", tmp_dir);
    snprintf(file, sizeof file, "%s",
             write_lib_table("lib", "NVIDIA_H100_80GB_HBM3.json",
                             "{\"format\": \"ffpa-tuning\", \"version\": 1, \"device\": \"NVIDIA H100 80GB HBM3\", "
                             "\"entries\": [" ENTRY("split-d", "false", 512, 8192, "\"stages\": 4") "]}"));
    ffpa_tuning_table *t =
        ffpa_tuning_load_for_device(DEVICE, 90, "cuda", "/nonexistent", cmd_dir, warn, sizeof warn);
    assert_non_null(t);
    assert_string_equal(warn, "");
    assert_int_equal(ffpa_tuning_entry_count(t), 1);
    ffpa_tuning_free(t);
    setenv("FFPA_TUNING", "off", 1);
    assert_null(ffpa_tuning_load_for_device(DEVICE, 90, "cuda", cmd_dir, NULL, warn, sizeof warn));
    unsetenv("FFPA_TUNING");
    assert_null(
        ffpa_tuning_load_for_device("Some Other GPU (sm_80, 1 SMs)", 80, "cuda", cmd_dir, NULL, warn, sizeof warn));
    assert_string_equal(warn, "");
    unlink(file);
}

/* A table of another backend (version 2 tables name theirs) is quietly
 * none of this backend's: HIP on an NVIDIA GPU sees the same device name
 * as CUDA and must not take CUDA-only choices. */
static void test_backend_mismatch(void **state)
{
    (void)state;
    char warn[256], printed[2048], cuda_text[1024];
    snprintf(cuda_text, sizeof cuda_text, "%.1000s",
             table_text(V2_HEAD, ENTRY("split-d", "false", 512, 8192, "\"kernel\": \"sm90\"")));
    char path[300];
    snprintf(path, sizeof path, "%s", write_text("cuda-table.json", cuda_text));
    memset(warn, 'x', sizeof warn);
    assert_null(ffpa_tuning_load(path, DEVICE, 90, "hip", warn, sizeof warn));
    assert_string_equal(warn, "");
    ffpa_tuning_table *t = ffpa_tuning_load(path, DEVICE, 90, "cuda", warn, sizeof warn);
    assert_non_null(t);
    ffpa_tuning_free(t);
    /* A version 1 table naming a backend is held to it too. */
    const char *v1 = write_text("v1-hip.json", table_text(V1_HEAD ", \"backend\": \"hip\"",
                                                          ENTRY("split-d", "false", 512, 8192, "\"stages\": 3")));
    memset(warn, 'x', sizeof warn);
    assert_null(ffpa_tuning_load(v1, DEVICE, 90, "cuda", warn, sizeof warn));
    assert_string_equal(warn, "");

    /* The folder search finds the device's file; another backend's is silence. */
    char dir[400], file[600];
    snprintf(file, sizeof file, "%s", write_lib_table("hiplib", "NVIDIA_H100_80GB_HBM3.json", cuda_text));
    snprintf(dir, sizeof dir, "%s/hiplib", tmp_dir);
    memset(warn, 'x', sizeof warn);
    assert_null(ffpa_tuning_load_for_device(DEVICE, 90, "hip", dir, NULL, warn, sizeof warn));
    assert_string_equal(warn, "");
    t = ffpa_tuning_load_for_device(DEVICE, 90, "cuda", dir, NULL, warn, sizeof warn);
    assert_non_null(t);
    ffpa_tuning_free(t);
    unlink(file);

    /* The core: a cuda table named by FFPA_TUNING_FILE, a cpu context: no warning. */
    unsetenv("FFPA_TUNING");
    setenv("FFPA_TUNING_FILE", path, 1);
    create_capturing(printed, sizeof printed);
    assert_string_equal(printed, "");
    unsetenv("FFPA_TUNING_FILE");
}

/* Architecture tables: "arch" instead of "device", held to the context's
 * arch, found after the device's own table (cuda only). */
static void test_arch_tables(void **state)
{
    (void)state;
    const char *a100 = "NVIDIA A100-SXM4-80GB (sm_80, 108 SMs)";
    char text[2048], warn[256];
    snprintf(text, sizeof text,
             "{\"format\": \"ffpa-tuning\", " V2_HEAD ", \"arch\": 80, \"measured_on\": \"an H100 as sm_80\", "
             "\"entries\": [" ENTRY("split-d", "false", 512, 8192, "\"kernel\": \"generic\", \"stages\": 3") "]}");
    const char *path = write_text("arch80.json", text);
    ffpa_tuning_table *t = ffpa_tuning_load(path, a100, 80, "cuda", warn, sizeof warn);
    assert_non_null(t);
    assert_string_equal(warn, "");
    assert_int_equal(ffpa_tuning_entry_count(t), 1);
    ffpa_tuning_free(t);
    /* Another arch: refused, saying which. */
    assert_null(ffpa_tuning_load(path, "NVIDIA GeForce RTX 4090 (sm_89, 128 SMs)", 89, "cuda", warn, sizeof warn));
    assert_non_null(strstr(warn, "table for sm_80; this device is sm_89"));
    /* "arch" beside "device", or not an sm version: malformed. */
    const char *bad[] = {"\"arch\": 80, \"device\": \"NVIDIA A100-SXM4-80GB\"", "\"arch\": \"80\"",
                         "\"arch\": 80.5", "\"arch\": 0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        snprintf(text, sizeof text,
                 "{\"format\": \"ffpa-tuning\", " V2_HEAD ", %s, \"entries\": [" ENTRY("split-d", "false", 512, 8192,
                                                                                   "\"stages\": 3") "]}",
                 bad[i]);
        assert_null(ffpa_tuning_load(write_text("arch-bad.json", text), a100, 80, "cuda", warn, sizeof warn));
        assert_non_null(strstr(warn, "expected \"arch\""));
    }

    /* The folder search: the device's table first, then cuda-sm_<arch>.json. */
    char name[64];
    assert_int_equal(ffpa_tuning_arch_file_name("cuda", 80, name, sizeof name), 1);
    assert_string_equal(name, "cuda-sm_80.json");
    assert_int_equal(ffpa_tuning_arch_file_name("hip", 80, name, sizeof name), 0);
    assert_string_equal(name, "");
    assert_int_equal(ffpa_tuning_arch_file_name("cuda", 0, name, sizeof name), 0);
    char dir[400], file[600], dev_file[600];
    snprintf(text, sizeof text,
             "{\"format\": \"ffpa-tuning\", " V2_HEAD ", \"arch\": 80, \"entries\": ["
             ENTRY("split-d", "false", 512, 8192, "\"stages\": 3") "]}");
    snprintf(file, sizeof file, "%s", write_lib_table("archlib", "cuda-sm_80.json", text));
    snprintf(dir, sizeof dir, "%s/archlib", tmp_dir);
    t = ffpa_tuning_load_for_device(a100, 80, "cuda", dir, NULL, warn, sizeof warn);
    assert_non_null(t);
    assert_string_equal(warn, "");
    assert_int_equal(ffpa_tuning_entry_count(t), 1);
    ffpa_tuning_free(t);
    /* No arch tables for another backend, nor for another arch. */
    assert_null(ffpa_tuning_load_for_device(a100, 80, "hip", dir, NULL, warn, sizeof warn));
    assert_string_equal(warn, "");
    assert_null(ffpa_tuning_load_for_device("NVIDIA A10 (sm_86, 72 SMs)", 86, "cuda", dir, NULL, warn, sizeof warn));
    assert_string_equal(warn, "");
    /* A device table beside it wins. */
    snprintf(text, sizeof text,
             "{\"format\": \"ffpa-tuning\", " V2_HEAD ", \"device\": \"NVIDIA A100-SXM4-80GB\", \"entries\": ["
             ENTRY("split-d", "false", 512, 8192, "\"stages\": 3") ", "
             ENTRY("split-d", "true", 512, 8192, "\"stages\": 2") "]}");
    snprintf(dev_file, sizeof dev_file, "%s", write_lib_table("archlib", "NVIDIA_A100-SXM4-80GB.json", text));
    t = ffpa_tuning_load_for_device(a100, 80, "cuda", dir, NULL, warn, sizeof warn);
    assert_non_null(t);
    assert_int_equal(ffpa_tuning_entry_count(t), 2);
    ffpa_tuning_free(t);
    unlink(dev_file);
    unlink(file);
}

/* FFPA_CUDA_AS_ARCH's limits: the part's arch and shared memory, the rest
 * the device's; nothing for an unknown part or one above the device. */
static void test_limits_as_arch(void **state)
{
    (void)state;
    ffpa_device_limits lim = h100_limits();
    assert_int_equal(ffpa_limits_as_arch(&lim, 80), 1);
    assert_int_equal(lim.arch, 80);
    assert_int_equal(lim.smem_per_block, 166912);
    assert_int_equal(lim.smem_per_sm, 167936);
    assert_int_equal(lim.sm_count, 132);
    lim = h100_limits();
    assert_int_equal(ffpa_limits_as_arch(&lim, 89), 1);
    assert_int_equal(lim.smem_per_block, 101376);
    const int refused[] = {75, 90, 100, 87, 0, -1};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; ++i) {
        lim = h100_limits();
        assert_int_equal(ffpa_limits_as_arch(&lim, refused[i]), 0);
        assert_int_equal(lim.arch, 90);
        assert_int_equal(lim.smem_per_block, 232448);
    }
    lim = sm86_limits(); /* an sm_86 part has too little shared memory to play an A100 */
    assert_int_equal(ffpa_limits_as_arch(&lim, 80), 0);
    assert_int_equal(ffpa_limits_as_arch(NULL, 80), 0);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/ffpa-test-tuning-XXXXXX");
    return mkdtemp(tmp_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_garbage_tables),
        cmocka_unit_test(test_file_name),
        cmocka_unit_test(test_nearest_shape),
        cmocka_unit_test(test_illegal_entries),
        cmocka_unit_test(test_tuned_plans_keep_invariants),
        cmocka_unit_test(test_core_env),
        cmocka_unit_test(test_v2_format),
        cmocka_unit_test(test_malformed_v2_fields),
        cmocka_unit_test(test_apply_tile),
        cmocka_unit_test(test_fwd_tiles),
        cmocka_unit_test(test_fwd_tile_per_part),
        cmocka_unit_test(test_apply_family_cluster),
        cmocka_unit_test(test_apply_backward),
        cmocka_unit_test(test_apply_backward_dkdv_names),
        cmocka_unit_test(test_apply_backward_hopper),
        cmocka_unit_test(test_v2_plans_keep_invariants),
        cmocka_unit_test(test_shipped_tables),
        cmocka_unit_test(test_backend_mismatch),
        cmocka_unit_test(test_arch_tables),
        cmocka_unit_test(test_limits_as_arch),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
