/* hub_python.h without Python (RLHF_PYTHON=OFF): the HF cache is still read in C
 * (hub_resolve.c); only a download or an upload, which go through huggingface_hub, are refused,
 * with what to do instead. */
#include "io/hub_python.h"

#include "common/error.h"
#include "python/py_embed.h"

int hub_python_snapshot_download(const char *repo_id, const char *revision, const char *key,
                                 char *out, size_t cap) {
    (void)out, (void)cap;
    return err_set("%s: '%s' is not a local directory and not in the Hugging Face cache: "
                   "download it first with `hf download %s%s%s` (or huggingface-cli download); "
                   "downloading it here needs huggingface_hub, " PY_EMBED_ABSENT,
                   key, repo_id, repo_id, revision ? " --revision " : "", revision ? revision : "");
}

int hub_python_upload(const HubUpload *u, char *url, size_t url_cap) {
    (void)url, (void)url_cap;
    return err_set("push_to_hub: uploading to %s needs huggingface_hub, " PY_EMBED_ABSENT
                   " (or upload the output directory yourself: `hf upload %s DIR`)",
                   u->repo_id, u->repo_id);
}
