/* The embedded CPython interpreter (libpython), started on first use.
 *
 * Axolotl users' reward functions and dataset transforms live in a rewards.py in their working
 * directory and Axolotl imports them under `python -m axolotl...`, which puts the working
 * directory first on sys.path. The interpreter is started the same way: the environment is read
 * as `python3` reads it (PYTHONPATH, an activated virtual environment of the same Python
 * version), no signal handlers are installed (Ctrl-C stays ours) and the working directory at
 * the moment of the first use is inserted at sys.path[0].
 *
 * Threads: Python is entered through py_embed_enter/py_embed_leave, which hold the GIL for the
 * caller; between calls the GIL is released. The trainer calls Python from its main thread only;
 * OpenMP worker threads never do.
 *
 * Lifetime: the interpreter is finalised by py_embed_shutdown, which is also registered with
 * atexit() on start, so that a program that never calls it still runs Python's own exit
 * handlers and frees the interpreter before the leak checker looks. After shutdown the
 * interpreter is not started again (libpython does not support a clean restart with extension
 * modules loaded): py_embed_enter fails with a message saying so.
 *
 * Hosted: when the library is loaded into a running Python program (the Python binding loads
 * librlhf.so with ctypes), Py_IsInitialized() is already true. The host's interpreter is then
 * used as it is: nothing is started, installed, put on sys.path or finalised, and the GIL is
 * taken with PyGILState_Ensure, which works from the thread that called into the library
 * (ctypes released the GIL for the call). */
#ifndef RLHF_PYTHON_PY_EMBED_H
#define RLHF_PYTHON_PY_EMBED_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>

/* Starts the interpreter if needed and takes the GIL for the calling thread. Returns 0 with
 * *gil set (pass it to py_embed_leave), or -1 with an error when Python cannot be started
 * (its message, e.g. the standard library was not found) or was already shut down. */
int py_embed_enter(PyGILState_STATE *gil);

/* Puts dir on sys.path right after the working directory (unless it is there already): rlhf.c
 * also finds a rewards.py next to the config file. Starts Python if needed (a hosted
 * interpreter's sys.path is changed too: the host asked for a config whose modules live there).
 * Returns 0, or -1 with an error. */
int py_embed_add_path(const char *dir);

/* Gives the GIL back; every successful py_embed_enter is paired with one call. */
void py_embed_leave(PyGILState_STATE gil);

/* Whether the interpreter is running now (started and not yet shut down). Objects held by C
 * structures are only released (Py_DECREF) while it is: after shutdown they are gone already. */
bool py_embed_running(void);

/* Whether the interpreter is a host program's (see Hosted above). */
bool py_embed_hosted(void);

/* Finalises the interpreter (Python's atexit handlers run, modules are freed). Safe to call more
 * than once and when Python was never started. Must be called from the thread that started it,
 * with no Python call in progress. */
void py_embed_shutdown(void);

#endif
