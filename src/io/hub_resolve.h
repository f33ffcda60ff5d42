/* Where a model named in a config or on the command line lives on disk: a local directory, or a
 * Hugging Face Hub repository id ("org/name") found in the HF cache or downloaded into it.
 *
 * The order is huggingface_hub's as a user meets it: a local directory of that name wins; then
 * the HF cache is read here in C (no Python, works with HF_HUB_OFFLINE=1); only when the cache
 * lacks the files a model needs is the repository downloaded, through the official client
 * (huggingface_hub.snapshot_download in the embedded interpreter, io/hub_python.h).
 *
 * The cache layout is huggingface_hub's (file_download.py, _snapshot_download.py):
 *   <cache>/models--<org>--<name>/refs/<revision>    the commit hash a branch or tag points at
 *   <cache>/models--<org>--<name>/snapshots/<commit>/ the repository's files at that commit
 * where <cache> is $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else
 * $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub; a revision that is a 40-digit
 * hex commit hash names its snapshot directly. Offline: HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE)
 * set to 1, ON, YES or TRUE, in any case.
 *
 * Unlike snapshot_download online, a complete cached snapshot of a branch is used without asking
 * the Hub whether the branch moved: a run never depends on the network when its model is on
 * disk. Pin a commit hash as the revision, or `hf download` again, to move on. */
#ifndef RLHF_IO_HUB_RESOLVE_H
#define RLHF_IO_HUB_RESOLVE_H

#include <stdbool.h>
#include <stddef.h>

/* What the resolved directory must hold; a cached snapshot without it counts as not cached. */
typedef enum {
    HUB_MODEL,     /* config.json and model.safetensors (or its shard index) */
    HUB_CONFIG,    /* config.json */
    HUB_TOKENIZER, /* tokenizer.json */
    HUB_ADAPTER    /* adapter_config.json and adapter_model.safetensors */
} HubNeed;

/* Whether `name` has the form of a Hub model repository id as huggingface_hub validates one
 * (validate_repo_id): "name" or "namespace/name", of letters, digits, '-', '_' and '.', with
 * no "--" or "..", not starting or ending with '-' or '.', at most 96 characters. */
bool hub_is_repo_id(const char *name);

/* Whether HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) says not to use the network. */
bool hub_offline(void);

/* The HF hub cache directory (see above) into buf. Returns 0, or -1 with an error when the
 * path does not fit or no home directory is known. */
int hub_cache_dir(char *buf, size_t cap);

/* The snapshot directory of repo_id at revision (NULL: "main") in the HF cache, into out, when
 * the cache has one holding what `need` asks for. Returns 1 when found, 0 when not (then
 * `missing`, when not NULL, names what is absent: the refs file, the snapshot or a file), -1 on
 * an error (with err_set). */
int hub_cache_find(const char *repo_id, const char *revision, HubNeed need, char *out, size_t cap,
                   char *missing, size_t missing_cap);

/* Resolves `name`, the value of config key `key` (a name for messages, e.g. "key 'base_model'"
 * or "--model"), to a local directory: `name` itself when it is a directory (or a file, such as a
 * tokenizer.json named directly); else, when it is a repository id, the cached snapshot, or the one
 * downloaded now (not when offline); else `name` itself, for the loader to say what is
 * missing there. On success returns 0 with *out a malloc'd path (the name as
 * given for a local directory) and *from_hub (may be NULL) telling whether it came from the Hub. On
 * failure returns -1 with one error naming the key, the name and what to do (install
 * huggingface_hub, `hf download <id>`, unset HF_HUB_OFFLINE, log in); nothing is written outside
 * the HF cache. */
int hub_resolve(const char *name, const char *revision, HubNeed need, const char *key, char **out,
                bool *from_hub);

#endif
