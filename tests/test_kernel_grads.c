/* Every backward kernel against central finite differences of its forward: with a random
 * upstream gradient c, L = Σ c ⊙ forward(inputs), and dL/dinput from the backward pass must
 * match (L(x + e) - L(x - e)) / 2e on every checked coordinate (tolerance 1% of the largest
 * gradient: fp32 forward, step 1e-2; a wrong formula is off by O(1)). */
#include "harness.h"
#include "kernels/cpu/kernels.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float frand(void) {
    return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
}

static float *rand_array(size_t n) {
    float *a = malloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++)
        a[i] = frand();
    return a;
}

/* The loss as a function of the current inputs (the test mutates them in place). */
typedef double (*LossFn)(void *ctx);

static double dot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

/* Compares grad[0..n) with finite differences of loss() in x[0..n), every `stride`-th entry. */
static void check_grad(const char *what, float *x, const float *grad, size_t n, size_t stride,
                       LossFn loss, void *ctx) {
    double scale = 0, worst = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(grad[i]));
    const float step = 1e-2f;
    for (size_t i = 0; i < n; i += stride) {
        float keep = x[i];
        x[i] = keep + step;
        double up = loss(ctx);
        x[i] = keep - step;
        double down = loss(ctx);
        x[i] = keep;
        double fd = (up - down) / (2.0 * step);
        worst = fmax(worst, fabs(fd - grad[i]));
    }
    CHECK(worst <= 1e-2 * scale + 1e-4, "%s: worst |fd - analytic| %.3g, largest gradient %.3g",
          what, worst, scale);
    CHECK(scale > 1e-3, "%s: gradient is not all zero", what);
}

/* ---- matmul ---- */
typedef struct {
    int n, in_dim, out_dim;
    float *in, *w, *b, *c, *out;
} MatmulCase;

static double matmul_loss(void *p) {
    MatmulCase *m = p;
    matmul_forward(m->out, m->in, m->w, m->b, m->n, m->in_dim, m->out_dim);
    return dot(m->out, m->c, (size_t)m->n * m->out_dim);
}

static void test_matmul(void) {
    MatmulCase m = {.n = 3, .in_dim = 5, .out_dim = 4};
    m.in = rand_array(15), m.w = rand_array(20), m.b = rand_array(4), m.c = rand_array(12);
    m.out = rand_array(12);
    float din[15], dw[20] = {0}, db[4] = {0};
    matmul_backward(din, dw, db, m.c, m.in, m.w, m.n, m.in_dim, m.out_dim);
    check_grad("matmul d_in", m.in, din, 15, 1, matmul_loss, &m);
    check_grad("matmul d_w", m.w, dw, 20, 1, matmul_loss, &m);
    check_grad("matmul d_bias", m.b, db, 4, 1, matmul_loss, &m);
    free(m.in), free(m.w), free(m.b), free(m.c), free(m.out);
}

/* ---- rmsnorm ---- */
typedef struct {
    int n, c;
    float *in, *w, *up, *out;
    bool one_plus; /* Gemma's (1 + w) gain */
} NormCase;

static double rmsnorm_loss(void *p) {
    NormCase *m = p;
    if (m->one_plus)
        rmsnorm_1p_forward(m->out, m->in, m->w, m->n, m->c, 1e-5f);
    else
        rmsnorm_forward(m->out, m->in, m->w, m->n, m->c, 1e-5f);
    return dot(m->out, m->up, (size_t)m->n * m->c);
}

static void test_rmsnorm(bool one_plus) {
    NormCase m = {.n = 3, .c = 8, .one_plus = one_plus};
    m.in = rand_array(24), m.w = rand_array(8), m.up = rand_array(24), m.out = rand_array(24);
    float din[24], dw[8] = {0};
    if (one_plus)
        rmsnorm_1p_backward(din, dw, m.up, m.in, m.w, m.n, m.c, 1e-5f);
    else
        rmsnorm_backward(din, dw, m.up, m.in, m.w, m.n, m.c, 1e-5f);
    check_grad(one_plus ? "rmsnorm (1 + w) d_in" : "rmsnorm d_in", m.in, din, 24, 1, rmsnorm_loss,
               &m);
    check_grad(one_plus ? "rmsnorm (1 + w) d_w" : "rmsnorm d_w", m.w, dw, 8, 1, rmsnorm_loss, &m);
    free(m.in), free(m.w), free(m.up), free(m.out);
}

/* ---- swiglu ---- */
typedef struct {
    float *gate, *up, *c, *out;
    bool gelu; /* Gemma's gelu_pytorch_tanh for silu */
} SwigluCase;

static double swiglu_loss(void *p) {
    SwigluCase *m = p;
    if (m->gelu)
        geglu_tanh_forward(m->out, m->gate, m->up, 16);
    else
        swiglu_forward(m->out, m->gate, m->up, 16);
    return dot(m->out, m->c, 16);
}

static void test_swiglu(bool gelu) {
    SwigluCase m = {rand_array(16), rand_array(16), rand_array(16), rand_array(16), gelu};
    for (int i = 0; i < 16; i++)
        m.gate[i] *= 4.0f; /* cover the sigmoid's (tanh's) tails */
    float dg[16], du[16];
    if (gelu)
        geglu_tanh_backward(dg, du, m.c, m.gate, m.up, 16);
    else
        swiglu_backward(dg, du, m.c, m.gate, m.up, 16);
    check_grad(gelu ? "geglu_tanh d_gate" : "swiglu d_gate", m.gate, dg, 16, 1, swiglu_loss, &m);
    check_grad(gelu ? "geglu_tanh d_up" : "swiglu d_up", m.up, du, 16, 1, swiglu_loss, &m);
    free(m.gate), free(m.up), free(m.c), free(m.out);
}

/* ---- rope ---- */
typedef struct {
    float *x, *c, *work, cos_t[8 * 4], sin_t[8 * 4];
    int32_t pos[3];
} RopeCase;

static double rope_loss(void *p) {
    RopeCase *m = p;
    memcpy(m->work, m->x, 3 * 2 * 8 * sizeof(float));
    rope_forward(m->work, m->pos, m->cos_t, m->sin_t, 3, 2, 8, 8);
    return dot(m->work, m->c, 48);
}

static void test_rope(void) {
    RopeCase m = {rand_array(48), rand_array(48), rand_array(48), {0}, {0}, {0, 3, 7}};
    for (int p = 0; p < 8; p++)
        for (int i = 0; i < 4; i++) {
            float angle = (float)p * powf(10000.0f, -(float)i / 4.0f);
            m.cos_t[p * 4 + i] = cosf(angle), m.sin_t[p * 4 + i] = sinf(angle);
        }
    float dx[48];
    memcpy(dx, m.c, sizeof dx);
    rope_backward(dx, m.pos, m.cos_t, m.sin_t, 3, 2, 8, 8);
    check_grad("rope d_x", m.x, dx, 48, 1, rope_loss, &m);
    free(m.x), free(m.c), free(m.work);
}

/* ---- fused log-prob: vocabulary wider than one tile ---- */
typedef struct {
    int n, h, vocab;
    float *hidden, *w, *g, *logp;
    int32_t *target;
    LogitCap cap; /* softcap 0: the plain kernel */
} LogprobCase;

static double logprob_loss(void *p) {
    LogprobCase *m = p;
    if (m->cap.softcap > 0)
        fused_logprob_forward_capped(m->logp, NULL, m->hidden, m->target, (WeightRef){.f32 = m->w},
                                     m->n, m->h, m->vocab, m->cap);
    else
        fused_logprob_forward(m->logp, m->hidden, m->target, m->w, m->n, m->h, m->vocab);
    return dot(m->logp, m->g, (size_t)m->n);
}

/* cap: Gemma 2's final soft cap with a sampling temperature's 1/T after it, or none */
static void test_fused_logprob(LogitCap cap) {
    LogprobCase m = {.n = 5, .h = 6, .vocab = 5000, .cap = cap};
    m.hidden = rand_array(30), m.w = rand_array((size_t)5000 * 6), m.g = rand_array(5);
    m.logp = rand_array(5);
    int32_t target[5] = {0, 4095, 4096, 4999, 17};
    m.target = target;
    for (int i = 0; i < 6; i++)
        m.w[(size_t)4096 * 6 + i] = 3.0f * m.hidden[2 * 6 + i]; /* peaked */
    float dh[30], *dw = calloc((size_t)5000 * 6, sizeof *dw);
    if (cap.softcap > 0)
        fused_logprob_backward_capped(dh, dw, m.g, m.hidden, m.target, (WeightRef){.f32 = m.w}, m.n,
                                      m.h, m.vocab, cap);
    else
        fused_logprob_backward(dh, dw, m.g, m.hidden, m.target, m.w, m.n, m.h, m.vocab);
    check_grad("fused_logprob d_hidden", m.hidden, dh, 30, 1, logprob_loss, &m);
    /* the target rows of lm_head carry the large gradients; check them and a sample of others */
    for (int r = 0; r < 5; r++) {
        size_t row = (size_t)target[r] * 6;
        check_grad("fused_logprob d_lm_head (target row)", m.w + row, dw + row, 6, 1, logprob_loss,
                   &m);
    }
    check_grad("fused_logprob d_lm_head (all rows, sampled)", m.w, dw, (size_t)5000 * 6, 997,
               logprob_loss, &m);
    free(m.hidden), free(m.w), free(m.g), free(m.logp), free(dw);
}

/* ---- attention: two query blocks, GQA, a prefix shared by two segments (one of which skips
 * seq_index values, as a dropped padding hole does), with and without a window ---- */
typedef struct {
    int window;
    AttnScores sc;
    float *q, *k, *v, *c, *out;
} AttentionCase;

enum { AN = 150, ANH = 4, ANKV = 2, AHD = 4 };
static const AttnSegment attention_segs[] = {{0, 70, 0, 0}, {70, 50, 0, 30}, {120, 30, 0, 30}};
static int32_t attention_seq_index[AN];

static double attention_loss(void *p) {
    AttentionCase *m = p;
    attention_forward_scored(m->out, m->q, m->k, m->v, attention_segs, 3, attention_seq_index, ANH,
                             ANKV, AHD, m->window, m->sc);
    return dot(m->out, m->c, (size_t)AN * ANH * AHD);
}

/* sc: 1/sqrt(hd) and no cap, or Gemma 2's own scale and a soft cap that bends these scores */
static void test_attention(int window, AttnScores sc) {
    size_t nq = (size_t)AN * ANH * AHD, nk = (size_t)AN * ANKV * AHD;
    for (int r = 0; r < 70; r++)
        attention_seq_index[r] = r;
    for (int r = 70; r < 120; r++)
        attention_seq_index[r] = 30 + (r - 70) + (r >= 90 ? 4 : 0);
    for (int r = 120; r < AN; r++)
        attention_seq_index[r] = 30 + (r - 120);
    AttentionCase m = {.window = window, .sc = sc};
    m.q = rand_array(nq), m.k = rand_array(nk), m.v = rand_array(nk), m.c = rand_array(nq);
    m.out = rand_array(nq);
    float *dq = malloc(nq * sizeof *dq), *dk = malloc(nk * sizeof *dk),
          *dv = malloc(nk * sizeof *dv);
    attention_backward_scored(dq, dk, dv, m.c, m.q, m.k, m.v, attention_segs, 3,
                              attention_seq_index, AN, ANH, ANKV, AHD, window, sc);
    char what[96];
    snprintf(what, sizeof what, "attention (window %d, softcap %g) d_q", window, sc.softcap);
    check_grad(what, m.q, dq, nq, 3, attention_loss, &m);
    snprintf(what, sizeof what, "attention (window %d, softcap %g) d_k", window, sc.softcap);
    check_grad(what, m.k, dk, nk, 2, attention_loss, &m);
    snprintf(what, sizeof what, "attention (window %d, softcap %g) d_v", window, sc.softcap);
    check_grad(what, m.v, dv, nk, 2, attention_loss, &m);
    free(m.q), free(m.k), free(m.v), free(m.c), free(m.out), free(dq), free(dk), free(dv);
}

/* ---- LoRA branch with dropout ---- */
typedef struct {
    float *in, *A, *B, *c, *out, p;
} LoraCase;

static double lora_loss(void *ctx) {
    LoraCase *m = ctx;
    memset(m->out, 0, 4 * 6 * sizeof(float));
    lora_forward_add(m->out, m->in, m->A, m->B, 4, 5, 6, 3, 1.7f, m->p, 12345);
    return dot(m->out, m->c, 4 * 6);
}

static void test_lora(float p) {
    LoraCase m = {rand_array(20), rand_array(15), rand_array(18),
                  rand_array(24), rand_array(24), p};
    float din[20] = {0}, dA[15] = {0}, dB[18] = {0};
    lora_backward(din, dA, dB, m.c, m.in, m.A, m.B, 4, 5, 6, 3, 1.7f, p, 12345);
    check_grad(p > 0 ? "lora (dropout) d_in" : "lora d_in", m.in, din, 20, 1, lora_loss, &m);
    check_grad(p > 0 ? "lora (dropout) d_A" : "lora d_A", m.A, dA, 15, 1, lora_loss, &m);
    check_grad(p > 0 ? "lora (dropout) d_B" : "lora d_B", m.B, dB, 18, 1, lora_loss, &m);
    free(m.in), free(m.A), free(m.B), free(m.c), free(m.out);
}

int main(void) {
    test_lora(0.0f);
    test_lora(0.3f);
    AttnScores plain = {0.5f, 0.0f}; /* 1/sqrt(AHD) */
    test_attention(0, plain);
    test_attention(30, plain);
    test_attention(30, (AttnScores){1.3f, 0.6f}); /* Gemma 2: scores of up to ~5 capped at 0.6 */
    srand(5);
    test_matmul();
    test_rmsnorm(false);
    test_rmsnorm(true);
    test_swiglu(false);
    test_swiglu(true);
    test_rope();
    test_fused_logprob((LogitCap){0.0f, 1.0f});
    test_fused_logprob((LogitCap){2.0f, 1.0f / 0.7f}); /* cap 2, then temperature 0.7 */
    return harness_finish("test_kernel_grads");
}
