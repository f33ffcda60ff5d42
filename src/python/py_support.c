#include "python/py_support.h"

#include "python/py_error.h"

#include <stdio.h>
#include <string.h>

#define PY_SUPPORT_MODULE "_rlhf_support"

/* Python, because these are questions about Python objects (signatures, coroutines, attribute
 * access) that the language answers in a line where the C API takes a page. */
static const char py_support_source[] =
    "import asyncio\n"
    "import atexit\n"
    "import inspect\n"
    "import numbers\n"
    "import types\n"
    "\n"
    "\n"
    "def _wrap(value):\n"
    "    if isinstance(value, dict) and not isinstance(value, DictDefault):\n"
    "        return DictDefault(value)\n"
    "    if isinstance(value, list):\n"
    "        return [_wrap(v) for v in value]\n"
    "    return value\n"
    "\n"
    "\n"
    "class DictDefault(dict):\n"
    "    \"\"\"A dict whose keys read as attributes and whose missing keys read as None.\"\"\"\n"
    "\n"
    "    def __init__(self, *args, **kwargs):\n"
    "        super().__init__()\n"
    "        for key, value in dict(*args, **kwargs).items():\n"
    "            dict.__setitem__(self, key, _wrap(value))\n"
    "\n"
    "    def __missing__(self, key):\n"
    "        return None\n"
    "\n"
    "    def __getattr__(self, name):\n"
    "        # Dunder names stay attributes, so copy, pickle and friends see a plain dict.\n"
    "        if name.startswith('__') and name.endswith('__'):\n"
    "            raise AttributeError(name)\n"
    "        return self[name]\n"
    "\n"
    "    def __setattr__(self, name, value):\n"
    "        self[name] = value\n"
    "\n"
    "    def __delattr__(self, name):\n"
    "        try:\n"
    "            del self[name]\n"
    "        except KeyError:\n"
    "            raise AttributeError(name) from None\n"
    "\n"
    "    def copy(self):\n"
    "        return DictDefault(self)\n"
    "\n"
    "    def to_dict(self):\n"
    "        def plain(v):\n"
    "            if isinstance(v, dict):\n"
    "                return {k: plain(x) for k, x in v.items()}\n"
    "            if isinstance(v, list):\n"
    "                return [plain(x) for x in v]\n"
    "            return v\n"
    "        return plain(self)\n"
    "\n"
    "\n"
    "class RewardLog:\n"
    "    \"\"\"Collects what a reward function logs through TRL's callbacks.\"\"\"\n"
    "\n"
    "    def __init__(self):\n"
    "        self.metrics = {}\n"
    "        self.extra = {}\n"
    "\n"
    "    def log_metric(self, name, value):\n"
    "        self.metrics.setdefault(str(name), []).append(float(value))\n"
    "\n"
    "    def log_extra(self, column, values):\n"
    "        self.extra.setdefault(str(column), []).extend(values)\n"
    "\n"
    "    def take(self):\n"
    "        taken = (self.metrics, self.extra)\n"
    "        self.metrics, self.extra = {}, {}\n"
    "        return taken\n"
    "\n"
    "\n"
    "def trainer_state(fields):\n"
    "    state = types.SimpleNamespace(global_step=0, max_steps=0, epoch=0.0)\n"
    "    for key, value in (fields or {}).items():\n"
    "        setattr(state, key, value)\n"
    "    return state\n"
    "\n"
    "\n"
    "def parameter_count(fn):\n"
    "    return len(inspect.signature(fn).parameters)\n"
    "\n"
    "\n"
    "def names_parameter(fn, name):\n"
    "    try:\n"
    "        return name in inspect.signature(fn).parameters\n"
    "    except (TypeError, ValueError):\n"
    "        return False\n"
    "\n"
    "\n"
    "def is_coroutine_function(fn):\n"
    "    return inspect.iscoroutinefunction(fn)\n"
    "\n"
    "\n"
    "_loop = None\n"
    "\n"
    "\n"
    "def run_coroutine(coro):\n"
    "    global _loop\n"
    "    if _loop is None or _loop.is_closed():\n"
    "        _loop = asyncio.new_event_loop()\n"
    "    return _loop.run_until_complete(coro)\n"
    "\n"
    "\n"
    "@atexit.register\n"
    "def _close_loop():\n"
    "    if _loop is not None and not _loop.is_closed():\n"
    "        _loop.close()\n"
    "\n"
    "\n"
    "def is_real(x):\n"
    "    return isinstance(x, numbers.Real)\n"
    "\n"
    "\n"
    "def dataset_load(kind, path, fmt, files, name, split, revision, data_files):\n"
    "    \"\"\"One split of a dataset, loaded with `datasets` as Axolotl loads it (see\n"
    "    data/dataset_source.h): kind 'files' (local files of format fmt), 'dir' (a saved "
    "dataset,\n"
    "    else a directory of shards) or 'hub' (a Hub dataset id).\"\"\"\n"
    "    import datasets\n"
    "    if kind == 'files':\n"
    "        return datasets.load_dataset(fmt, name=name, data_files=files, split=split)\n"
    "    if kind == 'dir':\n"
    "        try:\n"
    "            ds = datasets.load_from_disk(path)\n"
    "        except FileNotFoundError:\n"
    "            return datasets.load_dataset(path, name=name, split=split)\n"
    "        if isinstance(ds, datasets.DatasetDict):\n"
    "            if split not in ds:\n"
    "                raise ValueError(f'Unknown split \"{split}\". Should be one of {list(ds)}.')\n"
    "            return ds[split]\n"
    "        own = str(ds.split) if ds.split is not None else 'train'\n"
    "        if split != own:\n"
    "            raise ValueError(f'Unknown split \"{split}\". Should be one of [{own!r}].')\n"
    "        return ds\n"
    "    return datasets.load_dataset(path, name=name, split=split, data_files=data_files,\n"
    "                                 revision=revision)\n"
    "\n"
    "\n"
    "def dataset_revision(path, name, revision):\n"
    "    \"\"\"The commit a Hub dataset's revision names: asked of the Hub; offline, the ref in "
    "the\n"
    "    huggingface_hub cache, else the newest prepared copy in the `datasets` cache (the one\n"
    "    load_dataset then uses: <org>___<name>/<config>/<version>/<commit>), else the revision "
    "as\n"
    "    given.\"\"\"\n"
    "    import glob\n"
    "    import os\n"
    "    import re\n"
    "    from huggingface_hub import HfApi, constants\n"
    "    rev = revision or 'main'\n"
    "    offline = constants.HF_HUB_OFFLINE or os.environ.get('HF_DATASETS_OFFLINE', '').upper() "
    "in (\n"
    "        '1', 'ON', 'YES', 'TRUE')\n"
    "    if not offline:\n"
    "        try:\n"
    "            return HfApi().dataset_info(path, revision=rev).sha or rev\n"
    "        except Exception:  # unreachable or unknown here: loading the rows says why, if it "
    "fails\n"
    "            pass\n"
    "    if re.fullmatch('[0-9a-f]{40}', rev):\n"
    "        return rev\n"
    "    ref = os.path.join(constants.HF_HUB_CACHE, 'datasets--' + path.replace('/', '--'), "
    "'refs',\n"
    "                       rev)\n"
    "    try:\n"
    "        with open(ref) as f:\n"
    "            return f.read().strip()\n"
    "    except OSError:\n"
    "        pass\n"
    "    from datasets import config\n"
    "    copies = [d for d in glob.glob(os.path.join(config.HF_DATASETS_CACHE, path.replace('/', "
    "'___'),\n"
    "                                                name or '*', '*', '*'))\n"
    "              if os.path.isdir(d) and re.fullmatch('[0-9a-f]{40}', os.path.basename(d))]\n"
    "    if copies:\n"
    "        return os.path.basename(max(copies, key=os.path.getmtime))\n"
    "    return rev\n"
    "\n";

/* The module from sys.modules, made from the source above the first time; borrowed. */
static PyObject *support_module(void) {
    PyObject *modules = PyImport_GetModuleDict(); /* borrowed */
    PyObject *mod = PyDict_GetItemString(modules, PY_SUPPORT_MODULE);
    if (mod) return mod;
    PyObject *code =
        Py_CompileString(py_support_source, "<rlhf.c " PY_SUPPORT_MODULE ">", Py_file_input);
    if (!code) {
        py_error_set("rlhf.c's Python helpers do not compile");
        return NULL;
    }
    mod = PyImport_ExecCodeModule(PY_SUPPORT_MODULE, code); /* new; also put in sys.modules */
    Py_DECREF(code);
    if (!mod) {
        py_error_set("rlhf.c's Python helpers do not load");
        return NULL;
    }
    Py_DECREF(mod); /* sys.modules keeps it */
    return mod;
}

PyObject *py_support_import(const char *module) {
    /* The directory listings importlib caches may predate a file written a moment ago. The
     * import itself is made from C so that no frame of importlib's Python code sits between
     * the caller and the user's module in a traceback. */
    PyObject *importlib = PyImport_ImportModule("importlib");
    PyObject *done = importlib ? PyObject_CallMethod(importlib, "invalidate_caches", NULL) : NULL;
    Py_XDECREF(importlib);
    if (!done) return NULL;
    Py_DECREF(done);
    return PyImport_ImportModule(module);
}

PyObject *py_support_get(const char *name) {
    PyObject *mod = support_module();
    if (!mod) return NULL;
    PyObject *attr = PyObject_GetAttrString(mod, name);
    if (!attr) py_error_set("rlhf.c's Python helper %s", name);
    return attr;
}

void py_support_keep_exception(void) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (!type) return;
    PyErr_NormalizeException(&type, &value, &tb);
    if (value && tb) PyException_SetTraceback(value, tb);
    PyObject *mod = support_module();
    if (mod && value && PyObject_SetAttrString(mod, "last_exception", value) != 0) PyErr_Clear();
    PyErr_Restore(type, value, tb);
}

void py_support_first_search_dir(char *out, size_t cap) {
    PyObject *path = PySys_GetObject("path"); /* borrowed */
    PyObject *first = path && PyList_Check(path) && PyList_Size(path) > 0 ? PyList_GetItem(path, 0)
                                                                          : NULL; /* borrowed */
    const char *s = first && PyUnicode_Check(first) ? PyUnicode_AsUTF8(first) : NULL;
    PyErr_Clear();
    snprintf(out, cap, "%s", s ? s : "?");
}

bool py_support_module_missing(const char *module_name) {
    if (!PyErr_ExceptionMatches(PyExc_ModuleNotFoundError)) return false;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *name = value ? PyObject_GetAttrString(value, "name") : NULL;
    const char *missing = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    PyErr_Clear();
    size_t len = missing ? strlen(missing) : 0;
    bool itself = missing && strncmp(module_name, missing, len) == 0 &&
                  (module_name[len] == '\0' || module_name[len] == '.');
    Py_XDECREF(name);
    PyErr_Restore(type, value, tb);
    return itself;
}
