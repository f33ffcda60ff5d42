/* rlhf.c's own Python helpers, kept as Python source inside the library and loaded into the
 * embedded interpreter as the module `_rlhf_support` on first use:
 *
 *   DictDefault        the config as Axolotl hands it to dataset transforms (a dict whose keys
 *                      read as attributes, missing keys as None; nested dicts are DictDefaults)
 *   RewardLog          receives TRL's log_metric(name, value) / log_extra(column, values) calls
 *                      from a reward function; take() gives (metrics, extra) and empties it
 *   trainer_state(d)   a types.SimpleNamespace with global_step, max_steps, epoch (0 unless
 *                      given) and every other key of d
 *   parameter_count(f) len(inspect.signature(f).parameters), Axolotl's "at least two" test
 *   names_parameter(f, name)   whether f's signature has a parameter called name
 *   is_coroutine_function(f)   inspect.iscoroutinefunction(f), TRL's test for async rewards
 *   run_coroutine(c)   runs c to completion on one event loop kept for the whole run (TRL keeps
 *                      one too, so clients bound to a loop survive between batches)
 *   is_real(x)         isinstance(x, numbers.Real): numpy and other numeric scalars
 *   dataset_load(kind, path, fmt, files, name, split, revision, data_files)
 *                      one split of a dataset through `datasets` (data/dataset_library.h)
 *   dataset_revision(path, name, revision)   the commit a Hub dataset's revision names (the
 *                      Hub; offline: the huggingface_hub or `datasets` cache; else as given) */
#ifndef RLHF_PYTHON_PY_SUPPORT_H
#define RLHF_PYTHON_PY_SUPPORT_H

#include "python/py_embed.h"

#include <stdbool.h>
#include <stddef.h>

/* getattr(_rlhf_support, name) as a new reference, or NULL with an error. GIL held. */
PyObject *py_support_get(const char *name);

/* Imports a module by its dotted name, seeing files written since the last import (new
 * reference). NULL with the Python exception left set, so that the caller can tell
 * ModuleNotFoundError from a module that failed while running; GIL held. */
PyObject *py_support_import(const char *module);

/* Keeps a reference to the exception now set as _rlhf_support.last_exception, leaving it set:
 * a program hosting the library in its own interpreter (the Python binding) re-raises the
 * reward function's own exception, traceback and all, rather than only our message. GIL held. */
void py_support_keep_exception(void);

/* sys.path[0] (where a user's module is looked for first) into out, "?" when unknown. GIL
 * held. */
void py_support_first_search_dir(char *out, size_t cap);

/* Whether the exception now set (left set) says module_name itself, or a package above it, does
 * not exist, as opposed to the module existing and importing something missing. GIL held. */
bool py_support_module_missing(const char *module_name);

#endif
