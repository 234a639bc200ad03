/*
 * Unit tests of per-device tuning tables (common/tuning.c) and of how the
 * core uses them (api/ffpa.c): garbage tables give a warning and the
 * heuristics, never a crash; nearest-shape lookup; illegal values ignored
 * or clamped; tuned plans keep every planner invariant; FFPA_TUNING=0 and
 * FFPA_TUNING_FILE. Links the static ffpa_common archive and libffpa.
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

/* A table for DEVICE with the given entries (JSON array body). */
static ffpa_tuning_table *table_of(const char *entries)
{
    char text[8192], warn[256];
    snprintf(text, sizeof text,
             "{\"format\": \"ffpa-tuning\", \"version\": 1, \"device\": \"NVIDIA H100 80GB HBM3\",\n"
             " \"entries\": [%s]}",
             entries);
    ffpa_tuning_table *t = ffpa_tuning_load(write_text("table.json", text), DEVICE, warn, sizeof warn);
    if (!t)
        fail_msg("valid table rejected: %s", warn);
    assert_string_equal(warn, "");
    return t;
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
    ffpa_tuning_table *t = ffpa_tuning_load(path, DEVICE, warn, sizeof warn);
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
    assert_null(ffpa_tuning_load(NULL, DEVICE, NULL, 0));
    assert_null(ffpa_tuning_load(path, NULL, NULL, 0));
    assert_null(ffpa_tuning_load(path, DEVICE, NULL, 0));
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

#define ENTRY(path, causal, d, n, cfg)                                                           \
    "{\"pass\": \"fwd\", \"dtype\": \"bf16\", \"path\": \"" path "\", \"causal\": " causal        \
    ", \"gqa\": false, \"d\": " #d ", \"nq\": " #n ", \"nkv\": " #n ", \"config\": {" cfg "}}"

static void test_nearest_shape(void **state)
{
    (void)state;
    ffpa_device_limits lim = h100_limits();
    ffpa_tuning_table *t = table_of(ENTRY("small-d", "false", 128, 1024, "\"stages\": 4") ", "
                                    ENTRY("small-d", "false", 128, 16384, "\"stages\": 3") ", "
                                    ENTRY("split-d", "false", 512, 8192, "\"stages\": 4") ", "
                                    ENTRY("split-d", "false", 1024, 8192, "\"stages\": 2") ", "
                                    ENTRY("split-d", "true", 512, 8192, "\"stages\": 2"));
    assert_int_equal(ffpa_tuning_entry_count(t), 5);
    struct {
        int64_t d, n;
        int causal, want_stages; /* 0: the heuristic's */
    } cases[] = {
        {128, 1024, 0, 4},  {128, 2048, 0, 4}, {128, 8192, 0, 3}, {128, 32768, 0, 3},
        {64, 512, 0, 4},    /* nearest D on the same path */
        {512, 8192, 0, 4},  {576, 4096, 0, 4}, {768, 8192, 0, 2}, /* log2 768 is nearer 1024 */
        {1024, 512, 0, 2},  {512, 8192, 1, 2}, {320, 2048, 1, 2},
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
    assert_memory_equal(&heur, &tuned, sizeof heur); /* stages 9 ignored */
    in = fwd_input(512, 8192, 8192, 1);
    heur = plan_of(&in, &lim);
    in.tuning = t;
    assert_int_equal(plan_of(&in, &lim).stages, heur.stages); /* stages 1 ignored */
    in = fwd_input(128, 8192, 8192, 0);
    heur = plan_of(&in, &lim);
    in.tuning = t;
    tuned = plan_of(&in, &lim);
    assert_memory_equal(&heur, &tuned, sizeof heur); /* kv_splits outside decode ignored */
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
            assert_memory_equal(&heur, &tuned, sizeof heur);
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
    assert_memory_equal(&heur, &tuned, sizeof heur);
    ffpa_tuning_free(t);
}

/* ------------------------------------------------------------ invariants */

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
    static const int64_t ds[] = {8, 64, 96, 128, 200, 256, 320, 384, 512, 640, 768, 1024};
    static const int64_t ns[][2] = {{1, 1}, {1, 32768}, {4, 4096}, {16, 100000}, {100, 777}, {4096, 4096}};
    for (int l = 0; l < 2; ++l)
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; ++di)
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ++ni)
                for (int flags = 0; flags < 8; ++flags) {
                    ffpa_plan_input in = fwd_input(ds[di], ns[ni][0], ns[ni][1], flags & 1);
                    in.hkv = flags & 2 ? 8 : 32;
                    in.backward = (flags & 4) != 0;
                    ffpa_plan heur = plan_of(&in, &lims[l]);
                    in.tuning = t;
                    ffpa_plan p = plan_of(&in, &lims[l]);
                    assert_true(p.smem_bytes <= lims[l].smem_per_block);
                    assert_int_equal(p.smem_bytes, ffpa_plan_smem_bytes(&p, in.dtype, in.backward));
                    assert_true(p.stages == heur.stages || (p.stages >= 2 && p.stages <= 4));
                    assert_true(p.kv_splits >= 1);
                    if (p.kv_splits > 1)
                        assert_int_equal(p.path, FFPA_PATH_DECODE);
                    if (in.backward)
                        assert_int_equal(p.kv_splits, heur.kv_splits);
                    int64_t kv_blocks = (in.nkv + p.bc - 1) / p.bc;
                    assert_true(p.kv_splits <= kv_blocks);
                    /* no empty split */
                    int64_t per = (kv_blocks + p.kv_splits - 1) / p.kv_splits;
                    assert_true((int64_t)(p.kv_splits - 1) * per < kv_blocks);
                    assert_int_equal(p.q_blocks, (in.nq + p.br - 1) / p.br);
                    assert_int_equal(p.grid[0], p.q_blocks * p.kv_splits);
                    assert_int_equal(p.grid[1], in.hq);
                    assert_int_equal(p.grid[2], in.batch);
                    assert_int_equal(p.br, heur.br);
                    assert_int_equal(p.bc, heur.bc);
                    assert_int_equal(p.dqk_chunk, heur.dqk_chunk);
                    assert_int_equal(p.dv_chunk, heur.dv_chunk);
                    assert_int_equal(p.n_qk_chunks, heur.n_qk_chunks);
                    assert_int_equal(p.dv_padded, heur.dv_padded);
                    assert_int_equal(p.warps, heur.warps);
                    assert_int_equal(p.order, heur.order);
                }
    ffpa_tuning_free(t);
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
    char dir[300], warn[256];
    snprintf(dir, sizeof dir, "%s/lib/ffpa", tmp_dir);
    char cmd_dir[320];
    snprintf(cmd_dir, sizeof cmd_dir, "%s/lib", tmp_dir);
    assert_true(mkdir(cmd_dir, 0700) == 0 || access(cmd_dir, F_OK) == 0);
    assert_true(mkdir(dir, 0700) == 0 || access(dir, F_OK) == 0);
    strcat(dir, "/tuning");
    assert_true(mkdir(dir, 0700) == 0 || access(dir, F_OK) == 0);
    char file[400];
    snprintf(file, sizeof file, "%s/NVIDIA_H100_80GB_HBM3.json", dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs("{\"format\": \"ffpa-tuning\", \"version\": 1, \"device\": \"NVIDIA H100 80GB HBM3\", \"entries\": "
          "[" ENTRY("split-d", "false", 512, 8192, "\"stages\": 4") "]}",
          f);
    fclose(f);
    ffpa_tuning_table *t = ffpa_tuning_load_for_device(DEVICE, "/nonexistent", cmd_dir, warn, sizeof warn);
    assert_non_null(t);
    assert_string_equal(warn, "");
    assert_int_equal(ffpa_tuning_entry_count(t), 1);
    ffpa_tuning_free(t);
    setenv("FFPA_TUNING", "off", 1);
    assert_null(ffpa_tuning_load_for_device(DEVICE, cmd_dir, NULL, warn, sizeof warn));
    unsetenv("FFPA_TUNING");
    assert_null(ffpa_tuning_load_for_device("Some Other GPU (sm_80, 1 SMs)", cmd_dir, NULL, warn, sizeof warn));
    assert_string_equal(warn, "");
    unlink(file);
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
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
