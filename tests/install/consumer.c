/*
 * A program written as a user would, outside the project: it sees only the
 * installed <ffpa.h> and pkg-config file. It runs forward and backward on
 * random shapes and options (fp32, cpu backend) and compares with its own
 * float64 attention, written here independently of tests/oracle.c.
 */
#include <ffpa.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned long long seed = 88172645463325252ull;
static double rnd(void)
{
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return (double)(seed >> 11) / 9007199254740992.0;
}

/* Row-major [B][H][N][D] float arrays; GQA by h / (Hq / Hkv). */
static void reference(int B, int Hq, int Hkv, int Nq, int Nk, int D, int causal, const float *q,
                      const float *k, const float *v, const float *dout, double *o, double *dq,
                      double *dk, double *dv)
{
    double scale = 1.0 / sqrt((double)D);
    double *p = malloc(sizeof(double) * Nk), *dp = malloc(sizeof(double) * Nk);
    memset(dq, 0, sizeof(double) * B * Hq * Nq * D);
    memset(dk, 0, sizeof(double) * B * Hkv * Nk * D);
    memset(dv, 0, sizeof(double) * B * Hkv * Nk * D);
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < Hq; ++h) {
            int g = h / (Hq / Hkv);
            const float *Q = q + ((size_t)(b * Hq + h) * Nq) * D;
            const float *K = k + ((size_t)(b * Hkv + g) * Nk) * D;
            const float *V = v + ((size_t)(b * Hkv + g) * Nk) * D;
            const float *G = dout + ((size_t)(b * Hq + h) * Nq) * D;
            double *O = o + ((size_t)(b * Hq + h) * Nq) * D;
            for (int i = 0; i < Nq; ++i) {
                double m = -INFINITY, l = 0;
                for (int j = 0; j < Nk; ++j) {
                    double s = 0;
                    for (int d = 0; d < D; ++d)
                        s += (double)Q[i * D + d] * K[j * D + d];
                    p[j] = (causal && j > i + Nk - Nq) ? -INFINITY : s * scale;
                    if (p[j] > m)
                        m = p[j];
                }
                for (int j = 0; j < Nk; ++j) {
                    p[j] = m == -INFINITY ? 0 : exp(p[j] - m);
                    l += p[j];
                }
                double delta = 0;
                for (int d = 0; d < D; ++d) {
                    double acc = 0;
                    for (int j = 0; j < Nk; ++j)
                        acc += (l > 0 ? p[j] / l : 0) * V[j * D + d];
                    O[i * D + d] = acc;
                    delta += acc * G[i * D + d];
                }
                for (int j = 0; j < Nk; ++j) {
                    double pj = l > 0 ? p[j] / l : 0;
                    dp[j] = 0;
                    for (int d = 0; d < D; ++d) {
                        dp[j] += (double)G[i * D + d] * V[j * D + d];
                        dv[((size_t)(b * Hkv + g) * Nk + j) * D + d] += pj * G[i * D + d];
                    }
                    double ds = pj * (dp[j] - delta) * scale;
                    for (int d = 0; d < D; ++d) {
                        dq[((size_t)(b * Hq + h) * Nq + i) * D + d] += ds * K[j * D + d];
                        dk[((size_t)(b * Hkv + g) * Nk + j) * D + d] += ds * Q[i * D + d];
                    }
                }
            }
        }
    free(p);
    free(dp);
}

static float *random_floats(size_t n)
{
    float *x = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; ++i)
        x[i] = (float)(2 * rnd() - 1);
    return x;
}

static double max_rel(const float *got, const double *ref, size_t n)
{
    double err = 0, mag = 1e-30;
    for (size_t i = 0; i < n; ++i) {
        double e = fabs(got[i] - ref[i]);
        err = isnan(got[i]) ? INFINITY : e > err ? e : err;
        mag = fabs(ref[i]) > mag ? fabs(ref[i]) : mag;
    }
    return err / mag;
}

int main(void)
{
    ffpa_context *ctx;
    if (ffpa_create(&ctx, "cpu") != FFPA_OK) {
        fprintf(stderr, "consumer: %s\n", ffpa_last_error(NULL));
        return 1;
    }
    int failures = 0;
    for (int trial = 0; trial < 12; ++trial) {
        int B = 1 + (int)(rnd() * 2), Hkv = 1 + (int)(rnd() * 2), Hq = Hkv * (1 + (int)(rnd() * 3));
        int Nq = 1 + (int)(rnd() * 70), Nk = 1 + (int)(rnd() * 70), D = 8 * (1 + (int)(rnd() * 80));
        int causal = rnd() < 0.5;
        size_t nq = (size_t)B * Hq * Nq * D, nk = (size_t)B * Hkv * Nk * D;
        float *q = random_floats(nq), *k = random_floats(nk), *v = random_floats(nk);
        float *g = random_floats(nq), *o = malloc(sizeof(float) * nq), *lse = malloc(sizeof(float) * B * Hq * Nq);
        float *dq = malloc(sizeof(float) * nq), *dk = malloc(sizeof(float) * nk), *dv = malloc(sizeof(float) * nk);
        double *ro = malloc(sizeof(double) * nq), *rq = malloc(sizeof(double) * nq);
        double *rk = malloc(sizeof(double) * nk), *rv = malloc(sizeof(double) * nk);
        ffpa_tensor tq = ffpa_tensor_bhnd(q, FFPA_F32, B, Hq, Nq, D);
        ffpa_tensor tk = ffpa_tensor_bhnd(k, FFPA_F32, B, Hkv, Nk, D);
        ffpa_tensor tv = ffpa_tensor_bhnd(v, FFPA_F32, B, Hkv, Nk, D);
        ffpa_tensor to = ffpa_tensor_bhnd(o, FFPA_F32, B, Hq, Nq, D);
        ffpa_tensor tg = ffpa_tensor_bhnd(g, FFPA_F32, B, Hq, Nq, D);
        ffpa_tensor tl = ffpa_tensor_bhnd(lse, FFPA_F32, B, Hq, Nq, 1);
        ffpa_tensor tdq = ffpa_tensor_bhnd(dq, FFPA_F32, B, Hq, Nq, D);
        ffpa_tensor tdk = ffpa_tensor_bhnd(dk, FFPA_F32, B, Hkv, Nk, D);
        ffpa_tensor tdv = ffpa_tensor_bhnd(dv, FFPA_F32, B, Hkv, Nk, D);
        ffpa_options opt = ffpa_options_default();
        opt.causal = causal;
        if (ffpa_forward(ctx, &tq, &tk, &tv, &to, &tl, &opt) != FFPA_OK ||
            ffpa_backward(ctx, &tg, &tq, &tk, &tv, &to, &tl, &tdq, &tdk, &tdv, &opt) != FFPA_OK) {
            fprintf(stderr, "consumer: %s\n", ffpa_last_error(ctx));
            return 1;
        }
        reference(B, Hq, Hkv, Nq, Nk, D, causal, q, k, v, g, ro, rq, rk, rv);
        double e[4] = {max_rel(o, ro, nq), max_rel(dq, rq, nq), max_rel(dk, rk, nk), max_rel(dv, rv, nk)};
        int ok = e[0] < 1e-4 && e[1] < 1e-4 && e[2] < 1e-4 && e[3] < 1e-4;
        failures += !ok;
        printf("%s B=%d Hq=%d Hkv=%d Nq=%d Nk=%d D=%d causal=%d: O %.1e dQ %.1e dK %.1e dV %.1e\n",
               ok ? "ok  " : "FAIL", B, Hq, Hkv, Nq, Nk, D, causal, e[0], e[1], e[2], e[3]);
        free(q); free(k); free(v); free(g); free(o); free(lse); free(dq); free(dk); free(dv);
        free(ro); free(rq); free(rk); free(rv);
    }
    ffpa_destroy(ctx);
    return failures != 0;
}
