/* Helpers shared by the fuzz targets (fuzz/target_*.c), which run both under libFuzzer
 * (build-fuzz, RLHF_FUZZ=ON) and in the normal build's test_fuzz_regressions. */
#ifndef RLHF_FUZZ_UTIL_H
#define RLHF_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* A private directory, made on first use and removed (with the files fuzz_write_file put in
 * it) at exit. Some parsers only take a path: their targets write each input there. */
const char *fuzz_tmpdir(void);

/* Writes data to fuzz_tmpdir()/name and stores that path in `path` (at least 4096 bytes).
 * Aborts on I/O failure: that is the harness failing, not the parser. */
void fuzz_write_file(const char *name, const uint8_t *data, size_t size, char *path);

/* RLHF_SOURCE_DIR/rel, in a static buffer (fixtures loaded once per process). */
const char *fuzz_source_path(const char *rel);

#endif
