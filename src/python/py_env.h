/* The Python environment the user has activated (a venv/uv/virtualenv through VIRTUAL_ENV, else
 * a conda environment through CONDA_PREFIX), made visible to the embedded interpreter as
 * `python` in that environment would see it.
 *
 * Invariants:
 *  1. The stdlib and its compiled modules (lib-dynload) always come from the embedded libpython's
 *     own installation (RLHF_PYTHON_HOME, set by CMake), never from the python3 first on PATH:
 *     an environment made from another build of the same version (pyenv 3.11.7 over Debian's
 *     3.11.2) would otherwise load its `_ssl` into our libpython (`undefined symbol`).
 *  2. An environment of the embedded MAJOR.MINOR adds its site-packages (and their .pth files)
 *     after the stdlib; without `include-system-site-packages = true` in its pyvenv.cfg (a
 *     venv's default) the base installation's and the user's site-packages are dropped, as they
 *     are for `python` in that venv. sys.prefix, sys.exec_prefix and sys.executable name the
 *     environment, so code that starts `sys.executable` starts the environment's Python.
 *  3. An environment of another MAJOR.MINOR is an error naming both versions and both places;
 *     Python is not started (its site-packages hold modules built for another ABI). */
#ifndef RLHF_PYTHON_PY_ENV_H
#define RLHF_PYTHON_PY_ENV_H

#include <limits.h>
#include <stdbool.h>

typedef struct {
    char prefix[PATH_MAX];        /* the environment's directory */
    const char *variable;         /* "VIRTUAL_ENV" or "CONDA_PREFIX" */
    char site_packages[PATH_MAX]; /* prefix/lib/pythonX.Y/site-packages */
    bool system_site;             /* pyvenv.cfg's include-system-site-packages (conda: true) */
} PyEnvironment;

/* The activated environment, if any. `version` is the embedded "MAJOR.MINOR"; `home` the
 * embedded installation, for the message. Returns 1 with *env filled, 0 when none is activated
 * (or it is the embedded installation itself), or -1 with an error (invariant 3). Reads only
 * the environment variables and files; needs no interpreter. */
int py_env_find(PyEnvironment *env, const char *version, const char *home);

#ifdef RLHF_WITH_PYTHON
/* Puts the environment's site-packages on sys.path (invariant 2). The interpreter is running and
 * the GIL held. Returns 0, or -1 with an error. */
int py_env_activate(const PyEnvironment *env);
#endif

#endif
