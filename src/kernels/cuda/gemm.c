/* gemm.h's entry points: the argument checks of rule 5, the same for every implementation, then
 * the implementation's run. */
#include "kernels/cuda/gemm.h"

#include "common/error.h"
#include "kernels/cuda/gemm_impl.h"

static const char *op_name(GemmOp op) {
    return op == GEMM_OP_N ? "N" : "T";
}

static const char *type_name(GemmType t) {
    return t == GEMM_F32 ? "fp32" : "bf16";
}

/* Rule 5: a stored matrix of `rows` rows (of op(X) as gemm.h rule 2 derives them) needs
 * ld >= rows. */
static int check_ld(const char *ld_name, int ld, int rows, const char *shape) {
    if (ld < rows)
        return err_set("gemm_lt: %s = %d, but %s, so %s must be at least %d", ld_name, ld, shape,
                       ld_name, rows),
               GEMM_INVALID_VALUE;
    return 0;
}

static int check_call(const GemmCall *c) {
    if ((c->op_a != GEMM_OP_N && c->op_a != GEMM_OP_T) ||
        (c->op_b != GEMM_OP_N && c->op_b != GEMM_OP_T))
        return err_set("gemm_lt: op_a and op_b must be GEMM_OP_N or GEMM_OP_T (got %d, %d)",
                       (int)c->op_a, (int)c->op_b),
               GEMM_INVALID_VALUE;
    if (c->m < 1 || c->n < 1 || c->k < 1)
        return err_set("gemm_lt: m, n, k must be at least 1 (got %d, %d, %d)", c->m, c->n, c->k),
               GEMM_INVALID_VALUE;
    if (!c->A || !c->B || !c->C)
        return err_set("gemm_lt: A, B and C must not be NULL"), GEMM_INVALID_VALUE;
    if ((c->c_type != GEMM_F32 && c->c_type != GEMM_BF16) ||
        (c->ab_type != GEMM_F32 && c->ab_type != GEMM_BF16))
        return err_set("gemm_lt: types must be GEMM_F32 or GEMM_BF16"), GEMM_INVALID_VALUE;
    int a_rows = c->op_a == GEMM_OP_N ? c->m : c->k;
    int b_rows = c->op_b == GEMM_OP_N ? c->k : c->n;
    int rc = check_ld("lda", c->lda, a_rows,
                      c->op_a == GEMM_OP_N ? "A is m x k under op_a N" : "A is k x m under op_a T");
    if (!rc)
        rc = check_ld("ldb", c->ldb, b_rows,
                      c->op_b == GEMM_OP_N ? "B is k x n under op_b N" : "B is n x k under op_b T");
    if (!rc) rc = check_ld("ldc", c->ldc, c->m, "C is m x n");
    return rc;
}

int gemm_lt_bias(GemmLt *g, GemmOp op_a, GemmOp op_b, int m, int n, int k, float alpha,
                 const void *A, GemmType a_type, int lda, const void *B, GemmType b_type, int ldb,
                 float beta, void *C, GemmType c_type, int ldc, const void *bias) {
    if (a_type != b_type)
        return err_set("gemm_lt: A is %s but B is %s: both must be fp32 or both bf16",
                       type_name(a_type), type_name(b_type)),
               GEMM_INVALID_VALUE;
    GemmCall c = {.op_a = op_a,
                  .op_b = op_b,
                  .m = m,
                  .n = n,
                  .k = k,
                  .alpha = alpha,
                  .beta = beta,
                  .A = A,
                  .B = B,
                  .ab_type = a_type,
                  .lda = lda,
                  .ldb = ldb,
                  .C = C,
                  .c_type = c_type,
                  .ldc = ldc,
                  .bias = bias};
    int rc = check_call(&c);
    if (rc) return rc;
    g->error[0] = '\0';
    rc = g->run(g, &c);
    if (rc)
        return err_set("gemm_lt (%s, op %s%s, m %d n %d k %d, %s -> %s): %s", g->name,
                       op_name(op_a), op_name(op_b), m, n, k, type_name(a_type), type_name(c_type),
                       g->error),
               GEMM_FAILED;
    return 0;
}

int gemm_lt(GemmLt *g, GemmOp op_a, GemmOp op_b, int m, int n, int k, float alpha, const void *A,
            GemmType a_type, int lda, const void *B, GemmType b_type, int ldb, float beta, void *C,
            GemmType c_type, int ldc) {
    return gemm_lt_bias(g, op_a, op_b, m, n, k, alpha, A, a_type, lda, B, b_type, ldb, beta, C,
                        c_type, ldc, NULL);
}

const void *gemm_lt_ones(GemmLt *g, int n, GemmType t) {
    g->error[0] = '\0';
    const void *p = g->ones(g, n, t);
    if (!p) err_set("gemm_lt (%s): %d ones of %s: %s", g->name, n, type_name(t), g->error);
    return p;
}

const char *gemm_lt_name(const GemmLt *g) {
    return g->name;
}

void gemm_lt_free(GemmLt *g) {
    if (g) g->destroy(g);
}
