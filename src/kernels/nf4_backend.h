/* A backend's copy of a QLoRA NF4 weight (kernels/cpu/nf4.h), what a device backend's products
 * take as WeightRef.nf4 (backend_cuda.h invariant 7): a host Nf4Weight whose packed codes, absmax
 * codes and absmax scales are backend memory. The dequantised absmax is not copied (absmax is
 * NULL): the device recomputes it from the double quantisation, a quarter of the bytes. */
#ifndef RLHF_KERNELS_NF4_BACKEND_H
#define RLHF_KERNELS_NF4_BACKEND_H

#include "kernels/backend.h"
#include "kernels/cpu/nf4.h"

/* dev = host's arrays copied into be's memory. Returns 0, or -1 with an error (out of backend
 * memory; nothing is then held). */
int nf4_to_backend(const Backend *be, const Nf4Weight *host, Nf4Weight *dev);

/* Frees what nf4_to_backend allocated; an empty dev is ignored. */
void nf4_backend_free(const Backend *be, Nf4Weight *dev);

#endif
