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
