#include "python/py_env.h"

#include "python/py_embed.h"
#include "python/py_error.h"

#include "common/error.h"
#include "common/fileio.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "3.11.7" or "3.11.7.final.0" -> "3.11"; false when it does not start with two numbers. */
static bool major_minor(const char *text, char *out, size_t cap) {
    int major, minor, used = 0;
    if (sscanf(text, "%d.%d%n", &major, &minor, &used) != 2 || used == 0) return false;
    snprintf(out, cap, "%d.%d", major, minor);
    return true;
}

/* pyvenv.cfg's `version` (venv) or `version_info` (uv, virtualenv) and
 * `include-system-site-packages`. Returns whether the file exists. */
static bool read_pyvenv_cfg(const char *prefix, char *version, size_t cap, bool *system_site) {
    char path[PATH_MAX];
    if (path_join(path, sizeof path, prefix, "pyvenv.cfg") != 0) return false;
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *eq = strchr(line, '=');
        if (!eq) continue;
        char *key = line, *value = eq + 1;
        *eq = '\0';
        key += strspn(key, " \t");
        for (char *e = eq; e > key && (e[-1] == ' ' || e[-1] == '\t'); e--)
            e[-1] = '\0';
        value += strspn(value, " \t");
        value[strcspn(value, "\r\n")] = '\0';
        if (strcmp(key, "version") == 0 || strcmp(key, "version_info") == 0)
            major_minor(value, version, cap);
        else if (strcmp(key, "include-system-site-packages") == 0)
            *system_site = strcmp(value, "true") == 0;
    }
    fclose(f);
    return true;
}

/* The MAJOR.MINOR of prefix/lib/pythonX.Y: `want` when that directory exists, else the first
 * other one found; "" when there is none. */
static void lib_version(const char *prefix, const char *want, char *out, size_t cap) {
    char path[PATH_MAX];
    out[0] = '\0';
    int n = snprintf(path, sizeof path, "%s/lib/python%s", prefix, want);
    if (n > 0 && (size_t)n < sizeof path && dir_exists(path)) {
        snprintf(out, cap, "%s", want);
        return;
    }
    if (path_join(path, sizeof path, prefix, "lib") != 0) return;
    DIR *d = opendir(path);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strncmp(e->d_name, "python", 6) == 0 && major_minor(e->d_name + 6, out, cap)) break;
    closedir(d);
}

static bool same_directory(const char *a, const char *b) {
    char ra[PATH_MAX], rb[PATH_MAX];
    return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

int py_env_find(PyEnvironment *env, const char *version, const char *home) {
    memset(env, 0, sizeof *env);
    const char *value = getenv("VIRTUAL_ENV");
    env->variable = "VIRTUAL_ENV";
    if (!value || !value[0]) {
        value = getenv("CONDA_PREFIX");
        env->variable = "CONDA_PREFIX";
    }
    if (!value || !value[0]) return 0;
    if (home && home[0] && same_directory(value, home)) return 0;
    snprintf(env->prefix, sizeof env->prefix, "%s", value);
    char found[32] = "";
    /* conda environments are whole installations: `python` there sees only their own
     * site-packages (and the user's, which we leave out as a venv does) */
    if (!read_pyvenv_cfg(env->prefix, found, sizeof found, &env->system_site) || !found[0])
        lib_version(env->prefix, version, found, sizeof found);
    if (!found[0])
        return err_set("the activated Python environment %s ($%s) has no pyvenv.cfg version and "
                       "no lib/pythonX.Y: cannot tell its Python version (this rlhf embeds "
                       "Python %s); deactivate it or fix %s",
                       env->prefix, env->variable, version, env->variable);
    if (strcmp(found, version) != 0)
        return err_set("the activated Python environment %s ($%s) is Python %s, but this rlhf "
                       "embeds Python %s (%s): activate a Python %s environment, or rebuild rlhf "
                       "with this environment active (cmake -S . -B build picks the python3 on "
                       "PATH) so that it embeds Python %s",
                       env->prefix, env->variable, found, version, home && home[0] ? home : "?",
                       version, found);
    int n = snprintf(env->site_packages, sizeof env->site_packages, "%s/lib/python%s/site-packages",
                     env->prefix, version);
    if (n < 0 || (size_t)n >= sizeof env->site_packages)
        return err_set("$%s: path too long: %s", env->variable, env->prefix);
    return 1;
}

/* Python, because site.addsitedir is what processes the .pth files of an environment
 * (editable installs, namespace packages) exactly as `python` there does. */
static const char activate_source[] =
    "import os, site, sys\n"
    "def _rlhf_activate(prefix, site_dir, system_site):\n"
    "    base = set(site.getsitepackages())\n"
    "    base.add(site.getusersitepackages())\n"
    "    if system_site:\n"
    "        at = next((i for i, p in enumerate(sys.path) if p in base), len(sys.path))\n"
    "    else:\n"
    "        sys.path[:] = [p for p in sys.path if p not in base]\n"
    "        at = len(sys.path)\n"
    "    before = len(sys.path)\n"
    "    site.addsitedir(site_dir)\n"
    "    added = sys.path[before:]\n"
    "    del sys.path[before:]\n"
    "    sys.path[at:at] = added\n"
    "    sys.prefix = sys.exec_prefix = prefix\n"
    "    for name in ('python3', 'python'):\n"
    "        exe = os.path.join(prefix, 'bin', name)\n"
    "        if os.path.exists(exe):\n"
    "            sys.executable = exe\n"
    "            break\n";

int py_env_activate(const PyEnvironment *env) {
    PyObject *globals = PyDict_New();
    PyObject *done = globals
                         ? PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins()) == 0
                               ? PyRun_String(activate_source, Py_file_input, globals, globals)
                               : NULL
                         : NULL;
    PyObject *fn = done ? PyDict_GetItemString(globals, "_rlhf_activate") : NULL; /* borrowed */
    PyObject *result = fn ? PyObject_CallFunction(fn, "ssO", env->prefix, env->site_packages,
                                                  env->system_site ? Py_True : Py_False)
                          : NULL;
    int rc = result ? 0
                    : py_error_set("embedded Python: cannot put the site-packages of %s ($%s) on "
                                   "sys.path",
                                   env->prefix, env->variable);
    Py_XDECREF(result);
    Py_XDECREF(done);
    Py_XDECREF(globals);
    return rc;
}
