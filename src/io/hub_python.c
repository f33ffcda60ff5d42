#include "io/hub_python.h"

#include "common/error.h"
#include "python/py_embed.h"
#include "python/py_error.h"

#include <stdio.h>
#include <string.h>

#define HUB_MODULE "_rlhf_hub"

/* Each function returns (0, result) or (1, message): the classification of huggingface_hub's
 * exceptions into what the user should do is done where the exception types are known, and the
 * message is a whole sentence. Exception classes are matched by name along the MRO so that the
 * module works across huggingface_hub versions that moved them between modules. */
static const char hub_source[] =
    "def _kind(e):\n"
    "    names = {c.__name__ for c in type(e).__mro__}\n"
    "    for name in ('GatedRepoError', 'RevisionNotFoundError', 'RepositoryNotFoundError',\n"
    "                 'OfflineModeIsEnabled', 'LocalEntryNotFoundError', 'HfHubHTTPError'):\n"
    "        if name in names:\n"
    "            return name\n"
    "    return type(e).__name__\n"
    "\n"
    "\n"
    "def _first_line(e):\n"
    "    text = str(e).strip()\n"
    "    return text.splitlines()[0] if text else type(e).__name__\n"
    "\n"
    "\n"
    "def _no_hub(e):\n"
    "    return ('the huggingface_hub package is not installed in the Python rlhf runs (%s): '\n"
    "            'pip install huggingface_hub' % e)\n"
    "\n"
    "\n"
    "def _explain(e, repo_id, revision):\n"
    "    kind = _kind(e)\n"
    "    if kind == 'GatedRepoError':\n"
    "        why = ('is gated: accept its conditions on the Hub and give a token (HF_TOKEN or '\n"
    "               '`hf auth login`)')\n"
    "    elif kind == 'RevisionNotFoundError':\n"
    "        why = 'has no revision %r' % (revision or 'main')\n"
    "    elif kind == 'RepositoryNotFoundError':\n"
    "        why = ('was not found: it does not exist, or it is private and no valid token was '\n"
    "               'given (set HF_TOKEN or run `hf auth login`)')\n"
    "    elif kind in ('OfflineModeIsEnabled',):\n"
    "        why = 'cannot be reached: HF_HUB_OFFLINE is set'\n"
    "    elif kind == 'HfHubHTTPError':\n"
    "        why = 'could not be reached'\n"
    "    else:\n"
    "        why = 'could not be reached (no network, or the Hub is down)'\n"
    "    return '%s %s [%s: %s]' % (repo_id, why, kind, _first_line(e))\n"
    "\n"
    "\n"
    "def download(repo_id, revision, allow_patterns):\n"
    "    try:\n"
    "        from huggingface_hub import snapshot_download\n"
    "    except ImportError as e:\n"
    "        return (2, _no_hub(e))\n"
    "    try:\n"
    "        return (0, snapshot_download(repo_id, revision=revision,\n"
    "                                     allow_patterns=list(allow_patterns)))\n"
    "    except Exception as e:\n"
    "        return (1, _explain(e, repo_id, revision))\n"
    "\n"
    "\n"
    "def upload(repo_id, folder, path_in_repo, revision, message, private, allow_patterns,\n"
    "           token):\n"
    "    try:\n"
    "        from huggingface_hub import HfApi\n"
    "    except ImportError as e:\n"
    "        return (2, _no_hub(e))\n"
    "    api = HfApi(token=token)\n"
    "    try:\n"
    "        if folder is None:\n"
    "            url = api.create_repo(repo_id, private=private, exist_ok=True)\n"
    "            if revision:\n"
    "                api.create_branch(repo_id, branch=revision, exist_ok=True)\n"
    "            return (0, str(url))\n"
    "        info = api.upload_folder(repo_id=repo_id, folder_path=folder,\n"
    "                                 path_in_repo=path_in_repo, commit_message=message,\n"
    "                                 revision=revision, allow_patterns=allow_patterns,\n"
    "                                 ignore_patterns=['_*', 'checkpoint-*'])\n"
    "    except Exception as e:\n"
    "        kind = _kind(e)\n"
    "        if kind == 'RepositoryNotFoundError' or getattr(\n"
    "                getattr(e, 'response', None), 'status_code', 0) in (401, 403):\n"
    "            why = ('the Hub refused it: no valid token with write access (set HF_TOKEN or '\n"
    "                   'run `hf auth login`)')\n"
    "        else:\n"
    "            why = 'it failed'\n"
    "        return (1, '%s: %s [%s: %s]' % (repo_id, why, kind, _first_line(e)))\n"
    "    return (0, str(getattr(info, 'commit_url', info)))\n";

/* The module from sys.modules, made from hub_source the first time; borrowed. GIL held. */
static PyObject *hub_module(void) {
    PyObject *mod = PyDict_GetItemString(PyImport_GetModuleDict(), HUB_MODULE);
    if (mod) return mod;
    PyObject *code = Py_CompileString(hub_source, "<rlhf.c " HUB_MODULE ">", Py_file_input);
    if (!code) {
        py_error_set("rlhf.c's Hub helpers do not compile");
        return NULL;
    }
    mod = PyImport_ExecCodeModule(HUB_MODULE, code);
    Py_DECREF(code);
    if (!mod) {
        py_error_set("rlhf.c's Hub helpers do not load");
        return NULL;
    }
    Py_DECREF(mod); /* sys.modules keeps it */
    return mod;
}

static PyObject *pattern_list(void) {
    PyObject *list = PyList_New(0);
    for (int i = 0; list && hub_model_files[i]; i++) {
        PyObject *s = PyUnicode_FromString(hub_model_files[i]);
        if (!s || PyList_Append(list, s) != 0) Py_CLEAR(list);
        Py_XDECREF(s);
    }
    return list;
}

/* Calls _rlhf_hub.<fn>(*args) (a new reference to a tuple of arguments, stolen) and reads its
 * (status, text): 0 with the text in out; or -1 with an error "<context>: <text><hint>" (status
 * 1: the Hub's refusal or unreachable, 2: huggingface_hub missing). GIL held. */
static int call_hub(const char *fn, PyObject *args, const char *context, const char *hint,
                    char *out, size_t cap) {
    PyObject *mod = args ? hub_module() : NULL;
    PyObject *f = mod ? PyObject_GetAttrString(mod, fn) : NULL;
    PyObject *res = f ? PyObject_CallObject(f, args) : NULL;
    Py_XDECREF(f);
    Py_XDECREF(args);
    if (!res) return py_error_set("%s", context);
    long status = -1;
    const char *text = NULL;
    if (PyTuple_Check(res) && PyTuple_Size(res) == 2) {
        status = PyLong_AsLong(PyTuple_GetItem(res, 0));
        text = PyUnicode_AsUTF8(PyTuple_GetItem(res, 1));
    }
    int rc;
    if (!text)
        rc = py_error_set("%s: rlhf.c's Hub helper returned something unexpected", context);
    else if (status == 0)
        rc = snprintf(out, cap, "%s", text) < (int)cap
                 ? 0
                 : err_set("%s: the path is too long: %s", context, text);
    else
        rc = err_set("%s: %s%s", context, text, hint);
    Py_DECREF(res);
    return rc;
}

int hub_python_snapshot_download(const char *repo_id, const char *revision, const char *key,
                                 char *out, size_t cap) {
    char context[512], hint[512];
    snprintf(context, sizeof context,
             "%s: '%s' is not a local directory and not in the Hugging Face cache; downloading "
             "it failed",
             key, repo_id);
    snprintf(hint, sizeof hint,
             "; or download it first with `hf download %s%s%s` (or huggingface-cli download)",
             repo_id, revision ? " --revision " : "", revision ? revision : "");
    PyGILState_STATE gil;
    if (py_embed_enter(&gil) != 0) return err_prefix("%s", context);
    PyObject *patterns = pattern_list();
    PyObject *args = patterns ? Py_BuildValue("(szO)", repo_id, revision, patterns) : NULL;
    Py_XDECREF(patterns);
    int rc = call_hub("download", args, context, hint, out, cap);
    py_embed_leave(gil);
    return rc;
}

int hub_python_upload(const HubUpload *u, char *url, size_t url_cap) {
    char context[512], buf[1024];
    if (u->folder)
        snprintf(context, sizeof context,
                 "push_to_hub: uploading %s to the Hub repository %s failed", u->folder,
                 u->repo_id);
    else
        snprintf(context, sizeof context,
                 "push_to_hub: creating the Hub repository %s failed (nothing was trained or "
                 "written)",
                 u->repo_id);
    PyGILState_STATE gil;
    if (py_embed_enter(&gil) != 0) return err_prefix("%s", context);
    PyObject *allow = Py_None;
    Py_INCREF(allow);
    if (u->model_files_only) {
        Py_DECREF(allow);
        allow = pattern_list();
        PyObject *card = PyUnicode_FromString("README.md");
        if (allow && (!card || PyList_Append(allow, card) != 0)) Py_CLEAR(allow);
        Py_XDECREF(card);
    }
    PyObject *args = allow ? Py_BuildValue("(szzzsOOz)", u->repo_id, u->folder, u->path_in_repo,
                                           u->revision, u->commit_message,
                                           u->private_repo < 0 ? Py_None
                                           : u->private_repo   ? Py_True
                                                               : Py_False,
                                           allow, u->token)
                           : NULL;
    Py_XDECREF(allow);
    int rc = call_hub("upload", args, context, "", buf, sizeof buf);
    py_embed_leave(gil);
    if (rc == 0 && url) snprintf(url, url_cap, "%s", buf);
    return rc;
}
