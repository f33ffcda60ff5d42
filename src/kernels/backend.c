#include "kernels/backend.h"

const void *backend_mirror(const Backend *be, const void *host, size_t bytes, const char *what,
                           void **owned) {
    *owned = NULL;
    if (be->host_memory || bytes == 0) return host;
    void *dev = be->alloc(be, bytes, what);
    if (!dev) return NULL;
    be->copy(be, dev, host, bytes, BACKEND_HOST_TO_DEVICE);
    *owned = dev;
    return dev;
}

void backend_linears(const Backend *be, const LinearPart *parts, int count, const float *in, int n,
                     int in_dim) {
    if (be->linears) {
        be->linears(be, parts, count, in, n, in_dim);
        return;
    }
    for (int i = 0; i < count; i++)
        be->linear(be, parts[i].out, in, parts[i].w, NULL, parts[i].bias, n, in_dim,
                   parts[i].out_dim);
}

double backend_sum_squares_multi(const Backend *be, const GradTensor *tensors, int count) {
    if (be->sum_squares_multi) return be->sum_squares_multi(be, tensors, count);
    double total = 0.0;
    for (int t = 0; t < count; t++)
        total += be->sum_squares(be, tensors[t].g, tensors[t].n);
    return total;
}

void backend_adamw_multi(const Backend *be, const AdamWTensor *tensors, int count,
                         const AdamWStepCoefs *c, float step_size, float inv_bc2_sqrt) {
    if (be->adamw_multi) {
        be->adamw_multi(be, tensors, count, c, step_size, inv_bc2_sqrt);
        return;
    }
    AdamWStepCoefs each = *c;
    for (int t = 0; t < count; t++) {
        each.shrink = tensors[t].shrink;
        be->adamw(be, tensors[t].p, tensors[t].m, tensors[t].v, tensors[t].g, tensors[t].numel,
                  &each, step_size, inv_bc2_sqrt);
    }
}

void backend_rope_qk(const Backend *be, float *q, float *k, const int32_t *positions,
                     const float *cos_table, const float *sin_table, int n, int q_heads,
                     int k_heads, int hd, int rot, bool backward) {
    if (be->rope_qk) {
        be->rope_qk(be, q, k, positions, cos_table, sin_table, n, q_heads, k_heads, hd, rot,
                    backward);
        return;
    }
    void (*one)(const Backend *, float *, const int32_t *, const float *, const float *, int, int,
                int, int) = backward ? be->rope_backward : be->rope;
    one(be, q, positions, cos_table, sin_table, n, q_heads, hd, rot);
    one(be, k, positions, cos_table, sin_table, n, k_heads, hd, rot);
}
