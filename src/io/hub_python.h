/* The Hugging Face Hub through its official client, huggingface_hub, in the embedded
 * interpreter: downloads into the HF cache (snapshot_download) and uploads of an output
 * directory (create_repo, create_branch, upload_folder). Authentication, the endpoint and the
 * cache location are the client's own: HF_TOKEN (or `hf auth login`), HF_ENDPOINT, HF_HUB_CACHE
 * and HF_HOME.
 *
 * hub_python.c is built with Python; hub_python_absent.c stands in for it without (RLHF_PYTHON
 * OFF) and fails with one message saying what to install or to download first. */
#ifndef RLHF_IO_HUB_PYTHON_H
#define RLHF_IO_HUB_PYTHON_H

#include <stdbool.h>
#include <stddef.h>

/* The files of a repository a model run needs (snapshot_download's allow_patterns): config and
 * generation config, the weights (model*.safetensors and the shard index, not the duplicates
 * some repositories also hold, such as consolidated.safetensors), PEFT adapter files, the
 * tokenizer files and the chat template. NULL-terminated. */
extern const char *const hub_model_files[];

/* Downloads repo_id at revision (NULL: the default branch) into the HF cache with
 * huggingface_hub.snapshot_download, only hub_model_files. Returns 0 with the snapshot
 * directory in out, or -1 with an error that starts with `key` and says what to do:
 * huggingface_hub missing (pip install huggingface_hub), the repository not found or private
 * without a valid token, the revision not found, the Hub unreachable. */
int hub_python_snapshot_download(const char *repo_id, const char *revision, const char *key,
                                 char *out, size_t cap);

/* One upload of a local folder to a model repository. */
typedef struct {
    const char *repo_id;        /* "org/name" or "name" (the token's user namespace) */
    const char *folder;         /* the local directory uploaded; NULL: only create the
                                   repository and the branch */
    const char *path_in_repo;   /* NULL: the repository's root */
    const char *revision;       /* branch; NULL: main. Created when missing. */
    const char *commit_message; /* the commit's summary */
    int private_repo;           /* when the repository is created: 1 private, 0 public, -1 the
                                   account's default (create_repo(private=None)) */
    const char *token;          /* NULL: the client's own (HF_TOKEN, `hf auth login`) */
    bool model_files_only;      /* upload only hub_model_files (and README.md) */
} HubUpload;

/* Without a folder: creates the repository when it does not exist (create_repo(exist_ok=True),
 * private as asked) and the branch when a revision is given. With one: uploads the folder to the
 * existing repository in one commit (upload_folder, leaving out "_*" and "checkpoint-*" as
 * transformers' Trainer does). Returns 0 with the
 * commit's URL in url (may be NULL), or -1 with an error naming the repository and the cause
 * (no token, no permission, huggingface_hub missing, the Hub unreachable). Blocks until done. */
int hub_python_upload(const HubUpload *u, char *url, size_t url_cap);

#endif
