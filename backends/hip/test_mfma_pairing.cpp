/*
 * Host model of the MFMA pairing in arch_cdna.h: two logical warps' m16n8k16
 * fragments -> the operands of two v_mfma_f32_16x16x16 (transposed) -> back
 * to FragC. Checks the lane maps of arch_cdna.h against a model of the
 * documented wave64 operand layout, with exact small-integer data.
 * What it cannot check: that the hardware follows that layout (no AMD GPU
 * here); see docs/notes/hip.md.
 */
#include <cstdio>
#include <cstdlib>

#include "arch_cdna.h"

using namespace ffpa::arch::mfma_pair;

struct Word { float lo, hi; }; /* two 16-bit elements of a 32-bit register */

int main()
{
    int failures = 0;
    srand(7);
    for (int trial = 0; trial < 20; ++trial) {
        float A[2][16][16], B[2][16][8], D[2][16][8];
        for (int h = 0; h < 2; ++h) {
            for (int i = 0; i < 16; ++i)
                for (int k = 0; k < 16; ++k)
                    A[h][i][k] = (float)(rand() % 7 - 3);
            for (int k = 0; k < 16; ++k)
                for (int n = 0; n < 8; ++n)
                    B[h][k][n] = (float)(rand() % 7 - 3);
            for (int i = 0; i < 16; ++i)
                for (int n = 0; n < 8; ++n) {
                    D[h][i][n] = 0;
                    for (int k = 0; k < 16; ++k)
                        D[h][i][n] += A[h][i][k] * B[h][k][n];
                }
        }
        /* m16n8k16 fragments (PTX layout) of each wave lane. */
        Word fa[64][4], fb[64][2];
        for (int L = 0; L < 64; ++L) {
            int h = L >> 5, l = L & 31, g = l >> 2, q = l & 3;
            fa[L][0] = {A[h][g][2 * q], A[h][g][2 * q + 1]};
            fa[L][1] = {A[h][g + 8][2 * q], A[h][g + 8][2 * q + 1]};
            fa[L][2] = {A[h][g][2 * q + 8], A[h][g][2 * q + 9]};
            fa[L][3] = {A[h][g + 8][2 * q + 8], A[h][g + 8][2 * q + 9]};
            fb[L][0] = {B[h][2 * q][g], B[h][2 * q + 1][g]};
            fb[L][1] = {B[h][2 * q + 8][g], B[h][2 * q + 9][g]};
        }
        /* Two MFMAs, operands gathered with the lane maps under test. */
        float acc[64][4] = {};
        for (int kh = 0; kh < 2; ++kh) {
            float X[16][16], Y[16][16];
            for (int L = 0; L < 64; ++L) {
                for (int w = 0; w < 2; ++w) {
                    Word xa = b_live(L) ? fb[b_src_lane(L, w)][kh] : Word{0, 0};
                    Word ya = fa[a_src_lane(L, w)][a_src_reg(L, kh)];
                    int k = 4 * (L >> 4) + 2 * w;
                    X[L & 15][k] = xa.lo, X[L & 15][k + 1] = xa.hi; /* A slot */
                    Y[k][L & 15] = ya.lo, Y[k + 1][L & 15] = ya.hi; /* B slot */
                }
            }
            for (int L = 0; L < 64; ++L)
                for (int t = 0; t < 4; ++t) {
                    int m = 4 * (L >> 4) + t, n = L & 15;
                    for (int k = 0; k < 16; ++k)
                        acc[L][t] += X[m][k] * Y[k][n];
                }
        }
        for (int L = 0; L < 64; ++L) {
            int h = L >> 5, l = L & 31, g = l >> 2, q = l & 3;
            for (int e = 0; e < 4; ++e) {
                float got = acc[d_src_lane(L, e)][d_src_item(L, e)];
                float want = D[h][g + 8 * (e >> 1)][2 * q + (e & 1)];
                if (got != want && failures++ < 10)
                    printf("trial %d lane %d element %d: got %g, want %g\n", trial, L, e, got, want);
            }
        }
    }
    printf("%s: MFMA pairing lane maps, 20 random trials\n", failures ? "FAIL" : "ok");
    return failures ? 1 : 0;
}
