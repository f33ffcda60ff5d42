/* The embedded CPython interpreter (libpython), started on first use.
 *
 * Axolotl users' reward functions and dataset transforms live in a rewards.py in their working
 * directory and Axolotl imports them under `python -m axolotl...`, which puts the working
 * directory first on sys.path. The interpreter is started the same way: on the stdlib of the
 * embedded libpython's own installation, with PYTHONPATH and the user's activated venv/conda
 * environment of the same Python version as `python` there sees them (python/py_env.h; one of
 * another version is refused naming both), no signal handlers installed (Ctrl-C stays ours), and
 * the working directory at the moment of the first use inserted at sys.path[0].
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
 * (ctypes released the GIL for the call).
 *
 * Without Python: a build configured with RLHF_PYTHON=OFF (or AUTO where libpython was not found)
 * has no interpreter. src/python/py_absent.c then implements the functions below that need no
 * Python.h: nothing is ever running or hosted, and whatever would have run Python (reward
 * functions, dataset transforms, Python callables) fails with a message ending in
 * PY_EMBED_ABSENT. The GIL functions, whose types come from Python.h, exist only with
 * RLHF_WITH_PYTHON (CMake defines it for the library and everything that links it); only files
 * built with Python call them. */
#ifndef RLHF_PYTHON_PY_EMBED_H
#define RLHF_PYTHON_PY_EMBED_H

#ifdef RLHF_WITH_PYTHON
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#endif

#include <stdbool.h>

/* The end of every message refusing a feature that needs Python in a build without it, after
 * the clause that names the feature: "'rewards.fn' is a Python reward function, " PY_EMBED_ABSENT.
 * Tests look for "has no Python" in it. */
#define PY_EMBED_ABSENT                                                                            \
    "but this build of rlhf has no Python (rebuild with libpython3-dev installed, or "             \
    "-DRLHF_PYTHON=ON)"

/* Whether this build embeds Python (false: the stand-in py_absent.c). */
bool py_embed_compiled(void);

/* "MAJOR.MINOR" of the libpython this build is compiled against, or "" without Python. A static
 * string. */
const char *py_embed_version(void);

#ifdef RLHF_WITH_PYTHON
/* Starts the interpreter if needed and takes the GIL for the calling thread. Returns 0 with
 * *gil set (pass it to py_embed_leave), or -1 with an error when Python cannot be started
 * (its message, e.g. the standard library was not found, or an activated environment of
 * another Python version: py_env.h) or was already shut down. */
int py_embed_enter(PyGILState_STATE *gil);

/* Gives the GIL back; every successful py_embed_enter is paired with one call. */
void py_embed_leave(PyGILState_STATE gil);
#endif

/* Puts dir on sys.path right after the working directory (unless it is there already): rlhf.c
 * also finds a rewards.py next to the config file. Starts Python if needed (a hosted
 * interpreter's sys.path is changed too: the host asked for a config whose modules live there).
 * Returns 0, or -1 with an error. Without Python it does nothing and returns 0: there is no
 * path to extend, and the reward function or transform that wanted one reports the missing
 * Python itself, naming its key in the config. */
int py_embed_add_path(const char *dir);

/* Takes a new reference to `object`, a PyObject * handed over by a program hosting the library
 * in its own interpreter, when it is callable; `what` names it in the error ("reward function
 * NAME", "rollout function"). Returns 0, or -1
 * with an error (not callable; Python cannot be entered; without Python: PY_EMBED_ABSENT). The
 * caller gives the reference back with py_embed_release. */
int py_embed_keep_callable(void *object, const char *what);

/* Drops one reference to `object` (a PyObject *; NULL: nothing) under the GIL. Once the
 * interpreter has stopped, the object went with it and nothing is done. */
void py_embed_release(void *object);

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
