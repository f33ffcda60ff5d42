/* kernels/cuda/gemm.h over cuBLASLt (gemm_cublaslt.h).
 *
 * Invariants:
 *  1. A plan (matmul descriptor, layouts of A, B and C = D, algorithm) is made once per PlanKey
 *     and reused; every call with the same key runs the same algorithm, so its sums run in the
 *     same order (gemm.h rule 6). A full cache evicts the least recently used plan.
 *  2. The only per-call state written into a cached descriptor is the bias pointer, set just
 *     before the cublasLtMatmul that reads it (one thread uses a GemmLt).
 *  3. fp32 inputs compute in CUBLAS_COMPUTE_32F, never _FAST_TF32: all 24 bits of each product
 *     (gemm.h rule 3). bf16 inputs compute in fp32 too.
 *  4. The heuristic is told the pointers' real alignment (up to 16 bytes), which is part of the
 *     key: a chunk of the lm_head at an odd row may be only 4-byte aligned, and an algorithm
 *     chosen for 16-byte-aligned operands would read it wrongly or fail. */
#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/cuda/gemm_impl.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLAN_SLOTS 64

/* All ints, no padding: compared with memcmp. */
struct PlanKey {
    int op_a, op_b, m, n, k, lda, ldb, ldc, ab_type, c_type, has_bias;
    int align_a, align_b, align_c;
};

struct Plan {
    PlanKey key;
    bool made;
    unsigned long long last_use;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
};

struct LtGemm {
    GemmLt base; /* first: a GemmLt * is an LtGemm * */
    cublasLtHandle_t handle;
    cudaStream_t stream;
    void *workspace;
    size_t workspace_bytes;
    Plan plans[PLAN_SLOTS];
    unsigned long long clock;
    void *ones[2]; /* by GemmType, device memory */
    int ones_n[2];
};

static cudaDataType_t data_type(int t) {
    return t == GEMM_F32 ? CUDA_R_32F : CUDA_R_16BF;
}

static int alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int align = 16;
    while (align > 1 && a % (uintptr_t)align)
        align /= 2;
    return align;
}

static int lt_error(GemmLt *g, const char *what, cublasStatus_t st) {
    snprintf(g->error, sizeof g->error, "%s: %s (%s)", what, cublasLtGetStatusName(st),
             cublasLtGetStatusString(st));
    return GEMM_FAILED;
}

static void plan_release(Plan *p) {
    if (!p->made) return;
    cublasLtMatrixLayoutDestroy(p->a);
    cublasLtMatrixLayoutDestroy(p->b);
    cublasLtMatrixLayoutDestroy(p->c);
    cublasLtMatmulDescDestroy(p->desc);
    p->made = false;
}

/* Makes p for key: descriptor, layouts (gemm.h rule 2: stored rows x cols, column-major), and the
 * heuristic's best algorithm for the workspace we have. */
static int plan_make(LtGemm *lt, Plan *p, const PlanKey *key) {
    GemmLt *g = &lt->base;
    cublasStatus_t st;
    memset(p, 0, sizeof *p);
    p->key = *key;
    cublasOperation_t op_a = key->op_a == GEMM_OP_N ? CUBLAS_OP_N : CUBLAS_OP_T;
    cublasOperation_t op_b = key->op_b == GEMM_OP_N ? CUBLAS_OP_N : CUBLAS_OP_T;
    if ((st = cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)))
        return lt_error(g, "cublasLtMatmulDescCreate", st);
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a);
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b);
    if (key->has_bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    }
    int a_rows = key->op_a == GEMM_OP_N ? key->m : key->k;
    int a_cols = key->op_a == GEMM_OP_N ? key->k : key->m;
    int b_rows = key->op_b == GEMM_OP_N ? key->k : key->n;
    int b_cols = key->op_b == GEMM_OP_N ? key->n : key->k;
    cudaDataType_t ab = data_type(key->ab_type), c = data_type(key->c_type);
    if ((st = cublasLtMatrixLayoutCreate(&p->a, ab, a_rows, a_cols, key->lda)) ||
        (st = cublasLtMatrixLayoutCreate(&p->b, ab, b_rows, b_cols, key->ldb)) ||
        (st = cublasLtMatrixLayoutCreate(&p->c, c, key->m, key->n, key->ldc))) {
        p->made = true; /* destroying a NULL layout is allowed */
        plan_release(p);
        return lt_error(g, "cublasLtMatrixLayoutCreate", st);
    }
    p->made = true;
    cublasLtMatmulPreference_t pref;
    if ((st = cublasLtMatmulPreferenceCreate(&pref))) {
        plan_release(p);
        return lt_error(g, "cublasLtMatmulPreferenceCreate", st);
    }
    uint64_t ws = lt->workspace_bytes;
    uint32_t al_a = (uint32_t)key->align_a, al_b = (uint32_t)key->align_b;
    uint32_t al_c = (uint32_t)key->align_c;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof ws);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                         sizeof al_a);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                         sizeof al_b);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c,
                                         sizeof al_c);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c,
                                         sizeof al_c);
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    st = cublasLtMatmulAlgoGetHeuristic(lt->handle, p->desc, p->a, p->b, p->c, p->c, pref, 1,
                                        &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st || found == 0) {
        plan_release(p);
        return lt_error(g, "cublasLtMatmulAlgoGetHeuristic found no algorithm",
                        st ? st : CUBLAS_STATUS_NOT_SUPPORTED);
    }
    p->algo = result.algo;
    return 0;
}

/* The plan for key, made if new (invariant 1), or NULL with g->error. */
static Plan *plan_for(LtGemm *lt, const PlanKey *key) {
    Plan *oldest = &lt->plans[0];
    for (int i = 0; i < PLAN_SLOTS; i++) {
        Plan *p = &lt->plans[i];
        if (p->made && memcmp(&p->key, key, sizeof *key) == 0) {
            p->last_use = ++lt->clock;
            return p;
        }
        if (!p->made || (oldest->made && p->last_use < oldest->last_use)) oldest = p;
    }
    plan_release(oldest);
    if (plan_make(lt, oldest, key)) return NULL;
    oldest->last_use = ++lt->clock;
    return oldest;
}

static int lt_run(GemmLt *g, const GemmCall *c) {
    LtGemm *lt = (LtGemm *)g;
    PlanKey key = {(int)c->op_a,
                   (int)c->op_b,
                   c->m,
                   c->n,
                   c->k,
                   c->lda,
                   c->ldb,
                   c->ldc,
                   (int)c->ab_type,
                   (int)c->c_type,
                   c->bias != NULL,
                   alignment(c->A),
                   alignment(c->B),
                   alignment(c->C)};
    Plan *p = plan_for(lt, &key);
    if (!p) return GEMM_FAILED;
    if (c->bias) { /* invariant 2 */
        const void *bias = c->bias;
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                       sizeof bias);
    }
    cublasStatus_t st =
        cublasLtMatmul(lt->handle, p->desc, &c->alpha, c->A, p->a, c->B, p->b, &c->beta, c->C, p->c,
                       c->C, p->c, &p->algo, lt->workspace, lt->workspace_bytes, lt->stream);
    return st ? lt_error(g, "cublasLtMatmul", st) : 0;
}

static const void *lt_ones(GemmLt *g, int n, GemmType t) {
    LtGemm *lt = (LtGemm *)g;
    if (n <= lt->ones_n[t]) return lt->ones[t];
    size_t width = t == GEMM_F32 ? sizeof(float) : sizeof(uint16_t);
    void *host = malloc((size_t)n * width), *dev = NULL;
    if (!host) {
        snprintf(g->error, sizeof g->error, "out of host memory");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (t == GEMM_F32)
            ((float *)host)[i] = 1.0f;
        else
            ((uint16_t *)host)[i] = 0x3f80; /* bf16 1.0 */
    cudaError_t e = cudaMalloc(&dev, (size_t)n * width);
    if (e == cudaSuccess) e = cudaMemcpy(dev, host, (size_t)n * width, cudaMemcpyHostToDevice);
    free(host);
    if (e != cudaSuccess) {
        cudaFree(dev);
        snprintf(g->error, sizeof g->error, "%s", cudaGetErrorString(e));
        return NULL;
    }
    cudaStreamSynchronize(lt->stream); /* work queued before may still read the old vector */
    cudaFree(lt->ones[t]);
    lt->ones[t] = dev, lt->ones_n[t] = n;
    return dev;
}

static void lt_destroy(GemmLt *g) {
    LtGemm *lt = (LtGemm *)g;
    cudaStreamSynchronize(lt->stream);
    for (int i = 0; i < PLAN_SLOTS; i++)
        plan_release(&lt->plans[i]);
    cudaFree(lt->ones[0]);
    cudaFree(lt->ones[1]);
    cudaFree(lt->workspace);
    cublasLtDestroy(lt->handle);
    free(lt);
}

GemmLt *gemm_lt_cublaslt_new(void *stream, size_t workspace_bytes, char *why, size_t why_len) {
    LtGemm *lt = (LtGemm *)calloc(1, sizeof *lt);
    if (!lt) {
        snprintf(why, why_len, "out of host memory");
        return NULL;
    }
    lt->base.name = "cublaslt";
    lt->base.run = lt_run;
    lt->base.ones = lt_ones;
    lt->base.destroy = lt_destroy;
    lt->stream = (cudaStream_t)stream;
    lt->workspace_bytes = workspace_bytes ? workspace_bytes : (size_t)32 << 20;
    cublasStatus_t st = cublasLtCreate(&lt->handle);
    if (st) {
        snprintf(why, why_len, "cublasLtCreate: %s", cublasLtGetStatusString(st));
        free(lt);
        return NULL;
    }
    cudaError_t e = cudaMalloc(&lt->workspace, lt->workspace_bytes);
    if (e != cudaSuccess) {
        snprintf(why, why_len, "cudaMalloc of the %zu-byte cuBLASLt workspace: %s",
                 lt->workspace_bytes, cudaGetErrorString(e));
        cublasLtDestroy(lt->handle);
        free(lt);
        return NULL;
    }
    return &lt->base;
}
