#include "kernels/nf4_backend.h"

#include "common/error.h"

#include <string.h>

/* bytes of host copied into a new block of be's memory, or NULL with an error naming what. */
static void *copy_up(const Backend *be, const void *host, size_t bytes, const char *what) {
    void *d = be->alloc(be, bytes ? bytes : 1, what);
    if (d && bytes) be->copy(be, d, host, bytes, BACKEND_HOST_TO_DEVICE);
    return d;
}

int nf4_to_backend(const Backend *be, const Nf4Weight *host, Nf4Weight *dev) {
    memset(dev, 0, sizeof *dev);
    size_t blocks = nf4_blocks(host->numel);
    size_t blocks2 = (blocks + NF4_ABSMAX_BLOCK - 1) / NF4_ABSMAX_BLOCK;
    dev->numel = host->numel;
    dev->offset = host->offset;
    dev->packed = copy_up(be, host->packed, (host->numel + 1) / 2, "NF4 weights");
    if (dev->packed) dev->qabsmax = copy_up(be, host->qabsmax, blocks, "NF4 absmax codes");
    if (dev->qabsmax)
        dev->absmax2 = copy_up(be, host->absmax2, blocks2 * sizeof(float), "NF4 absmax scales");
    if (!dev->absmax2) {
        nf4_backend_free(be, dev);
        return -1;
    }
    return 0;
}

void nf4_backend_free(const Backend *be, Nf4Weight *dev) {
    be->free(be, dev->packed);
    be->free(be, dev->qabsmax);
    be->free(be, dev->absmax2);
    memset(dev, 0, sizeof *dev);
}
