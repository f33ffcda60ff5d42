#include "python/py_embed.h"

#include "common/error.h"
#include "python/py_env.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* CMake defines it (cmake/embedded_python.cmake); empty: libpython finds its own prefix. */
#ifndef RLHF_PYTHON_HOME
#define RLHF_PYTHON_HOME ""
#endif

static enum {
    PY_NOT_STARTED,
    PY_RUNNING,
    PY_FAILED, /* Py_InitializeFromConfig failed; start_failure says why */
    PY_SHUT_DOWN,
    PY_HOSTED, /* the library runs inside a Python process: its interpreter is ours to borrow */
} py_state = PY_NOT_STARTED;

/* The starting thread's state, parked while the GIL is released between calls. */
static PyThreadState *main_thread_state;
static char start_failure[512];

/* `python -m` puts the working directory (as an absolute path) first on sys.path. */
static int insert_cwd_first_on_path(void) {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        return err_set("embedded Python: cannot read the working directory for sys.path");
    PyObject *path = PySys_GetObject("path"); /* borrowed */
    PyObject *dir = PyUnicode_DecodeFSDefault(cwd);
    int rc = (path && PyList_Check(path) && dir) ? PyList_Insert(path, 0, dir) : -1;
    Py_XDECREF(dir);
    if (rc != 0) {
        PyErr_Clear();
        return err_set("embedded Python: cannot put %s on sys.path", cwd);
    }
    return 0;
}

/* py_env.h invariant 1: the stdlib of the embedded libpython's own installation. Left to
 * itself, libpython looks for "python3" on PATH and takes the stdlib named by that
 * interpreter's pyvenv.cfg: another build's, in an activated venv. PYTHONHOME still wins, as it
 * does for python3. */
static PyStatus set_home(PyConfig *config) {
    if (!RLHF_PYTHON_HOME[0] || getenv("PYTHONHOME")) return PyStatus_Ok();
    char program[PATH_MAX];
    snprintf(program, sizeof program, "%s/bin/python%s", RLHF_PYTHON_HOME, py_embed_version());
    PyStatus status = PyConfig_SetBytesString(config, &config->home, RLHF_PYTHON_HOME);
    if (PyStatus_Exception(status)) return status;
    return PyConfig_SetBytesString(config, &config->program_name, program);
}

static int start_interpreter(void) {
    PyEnvironment env;
    int found = py_env_find(&env, py_embed_version(), RLHF_PYTHON_HOME);
    if (found < 0) {
        snprintf(start_failure, sizeof start_failure, "%s", err_msg());
        py_state = PY_FAILED;
        return -1;
    }
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    /* Signals stay with the C program: a Python SIGINT handler would only set a flag that
     * nobody checks while C code runs. */
    config.install_signal_handlers = 0;
    config.parse_argv = 0;
    PyStatus status = set_home(&config);
    if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status)) {
        snprintf(start_failure, sizeof start_failure,
                 "cannot start the embedded Python (libpython %s): %s%s%s", PY_VERSION,
                 status.func ? status.func : "", status.func ? ": " : "",
                 status.err_msg ? status.err_msg : "exited during start-up");
        py_state = PY_FAILED;
        return err_set("%s", start_failure);
    }
    py_state = PY_RUNNING;
    int rc = found == 1 ? py_env_activate(&env) : 0;
    if (rc == 0) rc = insert_cwd_first_on_path();
    main_thread_state = PyEval_SaveThread();
    atexit(py_embed_shutdown);
    return rc;
}

int py_embed_enter(PyGILState_STATE *gil) {
    switch (py_state) {
    case PY_NOT_STARTED:
        /* Loaded into a Python program (the binding, through ctypes): that interpreter is
         * already running and stays the host's. We neither start nor finalise it, install
         * nothing, and leave sys.path as the host set it. */
        if (Py_IsInitialized()) {
            py_state = PY_HOSTED;
            break;
        }
        if (start_interpreter() != 0) return -1;
        break;
    case PY_RUNNING:
    case PY_HOSTED:
        break;
    case PY_FAILED:
        return err_set("%s", start_failure);
    case PY_SHUT_DOWN:
        return err_set("the embedded Python was already shut down (py_embed_shutdown)");
    }
    *gil = PyGILState_Ensure();
    return 0;
}

void py_embed_leave(PyGILState_STATE gil) {
    PyGILState_Release(gil);
}

bool py_embed_running(void) {
    return py_state == PY_RUNNING || (py_state == PY_HOSTED && Py_IsInitialized());
}

bool py_embed_hosted(void) {
    if (py_state == PY_NOT_STARTED && Py_IsInitialized()) py_state = PY_HOSTED;
    return py_state == PY_HOSTED;
}

void py_embed_shutdown(void) {
    if (py_state != PY_RUNNING) return;
    /* Called between Python calls the GIL is free and the parked state is taken back; a caller
     * that still holds it (shutdown from inside an entered section) keeps its own. */
    if (!PyGILState_Check()) PyEval_RestoreThread(main_thread_state);
    py_state = PY_SHUT_DOWN;
    if (Py_FinalizeEx() != 0) fprintf(stderr, "rlhf: embedded Python: error while finalising\n");
    main_thread_state = NULL;
}

int py_embed_add_path(const char *dir) {
    PyGILState_STATE gil;
    if (py_embed_enter(&gil) != 0) return -1;
    char abs[PATH_MAX];
    if (!realpath(dir, abs)) snprintf(abs, sizeof abs, "%s", dir);
    PyObject *path = PySys_GetObject("path"); /* borrowed */
    PyObject *entry = PyUnicode_DecodeFSDefault(abs);
    int rc = -1;
    if (path && PyList_Check(path) && entry) {
        int present = PySequence_Contains(path, entry);
        Py_ssize_t at = PyList_Size(path) > 0 ? 1 : 0; /* after the working directory */
        rc = present == 1 ? 0 : present == 0 ? PyList_Insert(path, at, entry) : -1;
    }
    Py_XDECREF(entry);
    if (rc != 0) {
        PyErr_Clear();
        rc = err_set("embedded Python: cannot put %s on sys.path", abs);
    }
    py_embed_leave(gil);
    return rc;
}

bool py_embed_compiled(void) {
    return true;
}

#define PY_EMBED_STR_(x) #x
#define PY_EMBED_STR(x)  PY_EMBED_STR_(x)

const char *py_embed_version(void) {
    return PY_EMBED_STR(PY_MAJOR_VERSION) "." PY_EMBED_STR(PY_MINOR_VERSION);
}

int py_embed_keep_callable(void *object, const char *what) {
    PyGILState_STATE gil;
    if (py_embed_enter(&gil) != 0) return -1;
    bool callable = PyCallable_Check((PyObject *)object);
    if (callable) Py_INCREF((PyObject *)object);
    py_embed_leave(gil);
    return callable ? 0 : err_set("%s is not callable", what);
}

void py_embed_release(void *object) {
    if (!object || !py_embed_running()) return;
    PyGILState_STATE gil;
    if (py_embed_enter(&gil) != 0) return;
    Py_DECREF((PyObject *)object);
    py_embed_leave(gil);
}
