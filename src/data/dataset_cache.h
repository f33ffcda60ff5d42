/* The tokenised dataset, cached under dataset_prepared_path so `rlhf preprocess` does the work
 * once and `rlhf train` reuses it.
 *
 * Invariants:
 *  1. A cache lives in <dataset_prepared_path>/<key>/examples.bin, <key> being a 64-bit FNV-1a
 *     hash (hex) of everything that shapes the tokens: each dataset's entry (type and every
 *     option), files and their bytes (a directory: its whole tree; a Hub dataset: the commit
 *     its revision names now), the chat template choice, sequence_len, the tokenizer's
 *     tokenizer.json, tokenizer_config.json and config.json bytes, and the EOS id. Any change
 *     gives another key,
 * so a stale cache is never read.
 *  2. examples.bin is written atomically: "RLHFSFT2", u64 example count, u64 count dropped for
 *     length, u64 tokenised rows (dropped ones included), u64 datasets, u64 rows per dataset,
 *     then per example u64 row (its place among the tokenised rows), u32 length, int32 ids, u8
 *     labels; little-endian. A file that does not parse exactly (truncated, wrong magic, ids out
 *     of range, rows out of order or out of range) is reported and ignored.
 *  3. The examples are cached in the order they were tokenised; sft_dataset_prepare then puts
 *     them in Axolotl's merged order (sft_dataset_merge), so training is the same with or
 *     without the cache. */
#ifndef RLHF_DATA_DATASET_CACHE_H
#define RLHF_DATA_DATASET_CACHE_H

#include "data/sft_dataset.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* The cache key of this config + tokenizer (invariant 1). Returns 0, or -1 when a file cannot
 * be read (the message names it). */
int dataset_cache_key(const TrainConfig *cfg, int32_t eos_id, uint64_t *key);

/* Where prepared datasets live: dataset_prepared_path, or Axolotl's default last_run_prepared. */
const char *dataset_prepared_root(const TrainConfig *cfg);

/* The directory of a key: <root>/<16 hex digits>. */
void dataset_cache_dir(const TrainConfig *cfg, uint64_t key, char *out, size_t cap);

/* The tokenised training data in Axolotl's merged order (sft_dataset_merge): read from the
 * cache when a valid one exists (unless `rebuild`), else tokenised and then cached. Says which on
 * `log`; a cache that exists but cannot be read is reported and rebuilt. cache_dir receives the
 * cache's directory. Returns 0, or -1 with an error. */
int sft_dataset_prepare(SftDataset *ds, const TrainConfig *cfg, const Tokenizer *tok,
                        int32_t eos_id, int vocab_size, bool rebuild, FILE *log, char *cache_dir,
                        size_t cap);

/* Reads the cache. Returns 1 when loaded, 0 when absent, -1 when present but unusable (message
 * set: the caller warns and tokenises again). vocab_size bounds the ids. */
int dataset_cache_read(const char *dir, int vocab_size, SftDataset *ds);

/* Writes the cache (invariant 2). Returns 0, or -1 with an error. */
int dataset_cache_write(const char *dir, const SftDataset *ds);

#endif
