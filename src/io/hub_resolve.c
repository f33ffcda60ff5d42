#include "io/hub_resolve.h"

#include "common/error.h"
#include "common/fileio.h"
#include "io/hub_python.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *const hub_model_files[] = {"config.json",
                                       "generation_config.json",
                                       "model*.safetensors",
                                       "model.safetensors.index.json",
                                       "adapter_config.json",
                                       "adapter_model.safetensors",
                                       "tokenizer.json",
                                       "tokenizer_config.json",
                                       "special_tokens_map.json",
                                       "chat_template.jinja",
                                       "chat_template.json",
                                       NULL};

static bool word_char(char c) {
    return isalnum((unsigned char)c) || c == '_';
}

/* One part of a repo id: [\w.-]{1,96} beginning and ending with a word character (the regex's
 * \b on each side). */
static bool valid_part(const char *s, size_t n) {
    if (n == 0 || n > 96 || !word_char(s[0]) || !word_char(s[n - 1])) return false;
    for (size_t i = 0; i < n; i++)
        if (!word_char(s[i]) && s[i] != '-' && s[i] != '.') return false;
    return true;
}

bool hub_is_repo_id(const char *name) {
    if (!name || !*name) return false;
    const char *slash = strchr(name, '/');
    if (slash && strchr(slash + 1, '/')) return false;
    if (strstr(name, "--") || strstr(name, "..")) return false;
    size_t n = strlen(name);
    if (n >= 4 && strcmp(name + n - 4, ".git") == 0) return false;
    if (!slash) return valid_part(name, n);
    return valid_part(name, (size_t)(slash - name)) && valid_part(slash + 1, strlen(slash + 1));
}

/* huggingface_hub's constants._is_true. */
static bool env_true(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v) return false;
    static const char *const yes[] = {"1", "ON", "YES", "TRUE"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
        if (strcasecmp(v, yes[i]) == 0) return true;
    return false;
}

bool hub_offline(void) {
    /* constants.HF_HUB_OFFLINE: HF_HUB_OFFLINE, or TRANSFORMERS_OFFLINE when that is unset or
     * empty (Python's `or` of two strings) */
    const char *v = getenv("HF_HUB_OFFLINE");
    return v && *v ? env_true("HF_HUB_OFFLINE") : env_true("TRANSFORMERS_OFFLINE");
}

/* os.path.expanduser on a leading "~" (what huggingface_hub applies to every cache variable). */
static int expand_user(char *buf, size_t cap, const char *path, const char *suffix) {
    const char *home = getenv("HOME");
    int n;
    if (path[0] == '~' && (path[1] == '/' || path[1] == '\0')) {
        if (!home || !*home) return err_set("%s: no HOME to expand '~' in", path);
        n = snprintf(buf, cap, "%s%s%s", home, path + 1, suffix);
    } else {
        n = snprintf(buf, cap, "%s%s", path, suffix);
    }
    if (n < 0 || (size_t)n >= cap) return err_set("the HF cache path is too long: %s", path);
    return 0;
}

int hub_cache_dir(char *buf, size_t cap) {
    const char *v;
    if ((v = getenv("HF_HUB_CACHE")) && *v) return expand_user(buf, cap, v, "");
    if ((v = getenv("HUGGINGFACE_HUB_CACHE")) && *v) return expand_user(buf, cap, v, "");
    if ((v = getenv("HF_HOME")) && *v) return expand_user(buf, cap, v, "/hub");
    if ((v = getenv("XDG_CACHE_HOME")) && *v) return expand_user(buf, cap, v, "/huggingface/hub");
    return expand_user(buf, cap, "~/.cache/huggingface/hub", "");
}

static bool is_commit_hash(const char *rev) {
    if (strlen(rev) != 40) return false;
    for (int i = 0; i < 40; i++)
        if (!isdigit((unsigned char)rev[i]) && !(rev[i] >= 'a' && rev[i] <= 'f')) return false;
    return true;
}

/* The files `need` asks of a directory: NULL when all are there, else the first one missing. */
static const char *first_missing(const char *dir, HubNeed need) {
    char path[PATH_MAX];
    static const char *const model[] = {"config.json", NULL};
    static const char *const config[] = {"config.json", NULL};
    static const char *const tokenizer[] = {"tokenizer.json", NULL};
    static const char *const adapter[] = {"adapter_config.json", "adapter_model.safetensors", NULL};
    const char *const *files = need == HUB_MODEL       ? model
                               : need == HUB_CONFIG    ? config
                               : need == HUB_TOKENIZER ? tokenizer
                                                       : adapter;
    for (int i = 0; files[i]; i++)
        if (path_join(path, sizeof path, dir, files[i]) != 0 || !file_exists(path)) return files[i];
    if (need == HUB_MODEL) {
        bool one = path_join(path, sizeof path, dir, "model.safetensors") == 0 && file_exists(path);
        bool index = path_join(path, sizeof path, dir, "model.safetensors.index.json") == 0 &&
                     file_exists(path);
        if (!one && !index) return "model.safetensors";
    }
    return NULL;
}

int hub_cache_find(const char *repo_id, const char *revision, HubNeed need, char *out, size_t cap,
                   char *missing, size_t missing_cap) {
    if (!revision) revision = "main";
    char cache[PATH_MAX], repo_dir[PATH_MAX], commit[128], path[PATH_MAX];
    if (hub_cache_dir(cache, sizeof cache) != 0) return -1;
    /* repo_folder_name: "models" and the id's parts joined by "--" */
    const char *slash = strchr(repo_id, '/');
    int n = slash ? snprintf(repo_dir, sizeof repo_dir, "%s/models--%.*s--%s", cache,
                             (int)(slash - repo_id), repo_id, slash + 1)
                  : snprintf(repo_dir, sizeof repo_dir, "%s/models--%s", cache, repo_id);
    if (n < 0 || (size_t)n >= sizeof repo_dir) return err_set("%s: cache path too long", repo_id);
    if (is_commit_hash(revision)) {
        snprintf(commit, sizeof commit, "%s", revision);
    } else {
        /* refs/<revision>: the commit hash, as written (huggingface_hub writes no newline and
         * reads the file whole; a newline added by hand is forgiven) */
        n = snprintf(path, sizeof path, "%s/refs/%s", repo_dir, revision);
        char *text = NULL;
        size_t len = 0;
        if (n < 0 || (size_t)n >= sizeof path || !file_exists(path) ||
            read_file(path, &text, &len) != 0) {
            err_clear();
            if (missing) snprintf(missing, missing_cap, "%s", path);
            return 0;
        }
        while (len > 0 && isspace((unsigned char)text[len - 1]))
            text[--len] = '\0';
        snprintf(commit, sizeof commit, "%s", text);
        free(text);
    }
    n = snprintf(out, cap, "%s/snapshots/%s", repo_dir, commit);
    if (n < 0 || (size_t)n >= cap) return err_set("%s: cache path too long", repo_id);
    if (!dir_exists(out)) {
        if (missing) snprintf(missing, missing_cap, "%s", out);
        return 0;
    }
    const char *absent = first_missing(out, need);
    if (absent) {
        if (missing) snprintf(missing, missing_cap, "%s/%s", out, absent);
        return 0;
    }
    return 1;
}

int hub_resolve(const char *name, const char *revision, HubNeed need, const char *key, char **out,
                bool *from_hub) {
    *out = NULL;
    if (from_hub) *from_hub = false;
    if (dir_exists(name) || file_exists(name)) { /* a file: a tokenizer.json named directly */
        *out = xstrdup(name);
        return 0;
    }
    /* a path that is no Hub id either: the loader says what is missing there */
    if (!hub_is_repo_id(name)) {
        *out = xstrdup(name);
        return 0;
    }
    char dir[PATH_MAX], missing[PATH_MAX];
    int found = hub_cache_find(name, revision, need, dir, sizeof dir, missing, sizeof missing);
    if (found < 0) return err_prefix("%s", key);
    if (found == 0) {
        const char *rev = revision ? revision : "main";
        char get[512];
        snprintf(get, sizeof get, "hf download %s%s%s", name, revision ? " --revision " : "",
                 revision ? revision : "");
        if (hub_offline())
            return err_set("%s: '%s' (revision %s) is not a local directory and is not in the "
                           "Hugging Face cache (%s not found), and HF_HUB_OFFLINE is set: "
                           "download it first with `%s` (or huggingface-cli download), or "
                           "unset HF_HUB_OFFLINE",
                           key, name, rev, missing, get);
        if (hub_python_snapshot_download(name, revision, key, dir, sizeof dir) != 0) return -1;
        const char *absent = first_missing(dir, need);
        if (absent)
            return err_set("%s: the Hub repository '%s' (revision %s) has no %s: it is not a "
                           "model rlhf.c can load this way",
                           key, name, rev, absent);
    }
    *out = xstrdup(dir);
    if (from_hub) *from_hub = true;
    return 0;
}
