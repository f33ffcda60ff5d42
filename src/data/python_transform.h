/* Dataset transforms written in Python (`datasets: [{type: rewards.oai_gsm8k_transform}]`), run
 * unchanged in the embedded interpreter the way Axolotl 0.19's RL data loader runs them
 * (utils/data/rl.py _load_split, prompt_strategies/base.py load).
 *
 * Resolution, as Axolotl's `load` does it: a name without a dot means "<name>.default"; the
 * function is the last dot-separated part and the module the one before it, imported as a
 * top-level module with the working directory first on sys.path ("rewards.fn" imports
 * ./rewards.py). Anything before those two parts is not a package path to Axolotl (a.b.fn
 * imports top-level module b) and is ignored here too.
 *
 * Contract: the function is a factory, called once as fn(cfg, dataset_idx=<i>) with the whole
 * config as a DictDefault (a dict whose keys read as attributes, cfg.trl.beta, and whose
 * missing keys read as None). It returns map_fn or (map_fn, {"remove_columns": [...]}), with
 * remove_columns a list of column names or "__all__" (every column the rows came with); names
 * the rows do not have are ignored, as Axolotl filters them out. No other map option is
 * supported. map_fn(row) is called once per row with the row as a dict; when its signature
 * names `tokenizer`, it is called as map_fn(row, tokenizer=None): rlhf.c has no Python
 * tokenizer to give it.
 *
 * Each output row follows `datasets.Dataset.map` (datasets 5.2): the row as map_fn left it
 * (in-place changes count) without the removed columns, then updated with the returned dict; a
 * removed column that map_fn also returns is kept with the new value. map_fn returning the row
 * object itself removes the columns from it. Returning None for every row leaves the rows as
 * they were (datasets treats it as a function run for its side effects). Every returned dict
 * must have the same keys as the first row's (datasets fails on a missing key and silently
 * drops an extra one; here both are errors naming the row). */
#ifndef RLHF_DATA_PYTHON_TRANSFORM_H
#define RLHF_DATA_PYTHON_TRANSFORM_H

#include <jansson.h>

/* Runs the transform `spec` over `rows` (an array of objects; not modified). cfg is the whole
 * config as JSON (NULL: an empty one). Returns 0 with *out_rows a new array of as many objects,
 * or -1 with an error naming the type, and the row index for a row's failure:
 * "dataset type 'rewards.t', row 3: KeyError: 'question' (at ./rewards.py:5 in transform_fn)". */
int python_transform_rows(const char *spec, const json_t *cfg, int dataset_idx, const json_t *rows,
                          json_t **out_rows);

#endif
