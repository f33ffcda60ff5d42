/* A raised Python exception as one of our error messages (common/error.h). */
#ifndef RLHF_PYTHON_PY_ERROR_H
#define RLHF_PYTHON_PY_ERROR_H

#include "common/error.h"

/* Takes the exception now set in the interpreter (clearing it) and records
 *     "<context>: <Type>: <message> (at <file>:<line> in <function>)"
 * where context is printf-style and the place is the innermost frame of the traceback whose
 * code came from a file, not from Python's frozen import machinery or our own helper module
 * (for a SyntaxError: the offending line of the file). Type is qualified by its module unless it is
 * a built-in. With no exception set the message says so. Call with the GIL held. Returns -1. */
int py_error_set(const char *fmt, ...) RLHF_PRINTF(1, 2);

/* The same "<Type>: <message> (at ...)" text written to out (cap bytes), for callers that put
 * it inside a sentence of their own. Takes and clears the exception. */
void py_error_take(char *out, size_t cap);

#endif
