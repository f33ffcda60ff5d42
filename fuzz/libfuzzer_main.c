/* The libFuzzer entry point of one target: FUZZ_TARGET names its body (set per binary by
 * CMake), so that each parser gets its own binary, corpus and crash files. */
#include "targets.h"

#ifndef FUZZ_TARGET
#error "FUZZ_TARGET must name a fuzz_* function of targets.h"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return FUZZ_TARGET(data, size);
}
