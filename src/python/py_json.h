/* JSON values (Jansson) as Python objects and back: the rows, prompts, completions, columns and
 * config that cross between the C trainer and users' Python code.
 *
 *     JSON         Python
 *     object       dict (str keys, order kept)
 *     array        list
 *     string       str
 *     integer      int (a bignum, json_util.h, beyond int64)
 *     real         float
 *     true/false   True/False
 *     null         None
 *
 * Going back, a tuple reads as an array (what `datasets` would store for it) and a dict subclass
 * (DictDefault) as an object. Anything else (sets, bytes, other objects, NaN or infinite floats,
 * keys that are not str) is an error naming where it sits. Both directions
 * need the GIL. */
#ifndef RLHF_PYTHON_PY_JSON_H
#define RLHF_PYTHON_PY_JSON_H

#include "python/py_embed.h"

#include <jansson.h>

/* A new reference, or NULL with an error set (the Python exception is cleared). */
PyObject *py_from_json(const json_t *v);

/* A new JSON value, or NULL with the error "<what><path>: <problem>", e.g.
 * "row 3['prompt'][0]: a set is not a JSON value". `what` names the root for messages. */
json_t *py_to_json(PyObject *o, const char *what);

#endif
