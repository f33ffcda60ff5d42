#include "train/hub_push.h"

#include "common/error.h"
#include "io/hub_python.h"

#include <limits.h>
#include <stdbool.h>
#include <string.h>

void hub_push_repo_id(const TrainConfig *cfg, char *buf, size_t cap) {
    if (cfg->hub_model_id) {
        snprintf(buf, cap, "%s", cfg->hub_model_id);
        return;
    }
    /* Path(output_dir).absolute().name: the last component, trailing slashes ignored */
    const char *dir = cfg->output_dir;
    size_t end = strlen(dir);
    while (end > 1 && dir[end - 1] == '/')
        end--;
    size_t start = end;
    while (start > 0 && dir[start - 1] != '/')
        start--;
    snprintf(buf, cap, "%.*s", (int)(end - start), dir + start);
}

static int upload(const TrainConfig *cfg, const char *folder, const char *path_in_repo,
                  const char *message, bool model_files_only, FILE *log) {
    char repo[256], url[1024];
    hub_push_repo_id(cfg, repo, sizeof repo);
    HubUpload u = {.repo_id = repo,
                   .folder = folder,
                   .path_in_repo = path_in_repo,
                   .revision = cfg->hub_revision,
                   .commit_message = message,
                   .private_repo = cfg->hub_private_repo ? 1 : 0,
                   .token = cfg->hub_token,
                   .model_files_only = model_files_only};
    if (hub_python_upload(&u, url, sizeof url) != 0) return -1;
    if (!folder) {
        fprintf(log, "pushing to the Hub repository %s%s%s\n", url,
                cfg->hub_revision ? ", branch " : "", cfg->hub_revision ? cfg->hub_revision : "");
        return 0;
    }
    fprintf(log, "pushed %s%s%s to the Hub: %s\n", folder, path_in_repo ? " as " : "",
            path_in_repo ? path_in_repo : "", url);
    return 0;
}

int hub_push_init(const TrainConfig *cfg, FILE *log) {
    if (!cfg->push_to_hub) return 0;
    return upload(cfg, NULL, NULL, "", false, log);
}

int hub_push_output(const TrainConfig *cfg, const char *commit_message, FILE *log) {
    if (!cfg->push_to_hub) return 0;
    return upload(cfg, cfg->output_dir, NULL, commit_message, false, log);
}

int hub_push_checkpoint(const TrainConfig *cfg, const char *checkpoint_dir, int64_t step,
                        FILE *log) {
    /* TrainingArguments' default, which Axolotl keeps when hub_strategy is unset */
    const char *strategy = cfg->hub_strategy ? cfg->hub_strategy : "every_save";
    if (!cfg->push_to_hub || strcmp(strategy, "end") == 0) return 0;
    char message[128], name[64];
    snprintf(message, sizeof message, "Training in progress, step %lld", (long long)step);
    /* transformers copies the checkpoint's model files into output_dir and pushes that; the
     * same files land in the repository's root here, straight from the checkpoint */
    if (upload(cfg, checkpoint_dir, NULL, message, true, log) != 0) return -1;
    if (strcmp(strategy, "every_save") == 0) return 0;
    snprintf(name, sizeof name, "checkpoint-%lld", (long long)step);
    snprintf(message, sizeof message, "Training in progress, step %lld, checkpoint",
             (long long)step);
    return upload(cfg, checkpoint_dir,
                  strcmp(strategy, "checkpoint") == 0 ? "last-checkpoint" : name, message, false,
                  log);
}
