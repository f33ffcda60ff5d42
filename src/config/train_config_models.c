/* The model paths of a loaded config made local: each one a directory, or a Hugging Face Hub id
 * found in the HF cache or downloaded into it (io/hub_resolve.h). Kept apart from loading so that
 * reading a config never touches the network: the commands that load models call this. */
#include "config/train_config.h"

#include "common/error.h"
#include "io/hub_resolve.h"

#include <stdlib.h>
#include <string.h>

/* Replaces *field (when set) by the directory it resolves to; *hub_id (may be NULL) receives the
 * id it was when it came from the Hub. */
static int resolve_field(const TrainConfig *cfg, char **field, const char *key,
                         const char *revision, HubNeed need, char **hub_id) {
    if (!*field) return 0;
    char what[64], *dir = NULL;
    snprintf(what, sizeof what, "key '%s'", key);
    bool from_hub = false;
    if (hub_resolve(*field, revision, need, what, &dir, &from_hub) != 0)
        return err_prefix("%s", cfg->source);
    if (hub_id && from_hub) *hub_id = xstrdup(*field);
    free(*field);
    *field = dir;
    return 0;
}

int train_config_resolve_models(TrainConfig *cfg) {
    if (cfg->push_to_hub && cfg->hub_model_id && !hub_is_repo_id(cfg->hub_model_id))
        return err_set("%s: key 'hub_model_id': '%s' is not a Hub repository id (org/name)",
                       cfg->source, cfg->hub_model_id);
    /* the tokenizer and the config default to the base model's own id: they share its
     * revision then, as Axolotl passes revision_of_model to both loads */
    const char *rev = cfg->revision_of_model;
    bool tok_is_base = strcmp(cfg->tokenizer_config, cfg->base_model) == 0;
    bool config_is_base =
        cfg->base_model_config && strcmp(cfg->base_model_config, cfg->base_model) == 0;
    free(cfg->base_model_id);
    cfg->base_model_id = NULL;
    if (resolve_field(cfg, &cfg->base_model, "base_model", rev, HUB_MODEL, &cfg->base_model_id) !=
            0 ||
        resolve_field(cfg, &cfg->base_model_config, "base_model_config",
                      config_is_base ? rev : NULL, HUB_CONFIG, NULL) != 0 ||
        resolve_field(cfg, &cfg->tokenizer_config, "tokenizer_config", tok_is_base ? rev : NULL,
                      HUB_TOKENIZER, NULL) != 0 ||
        resolve_field(cfg, &cfg->lora_model_dir, "lora_model_dir", NULL, HUB_ADAPTER, NULL) != 0)
        return -1;
    /* rlhf.c reads the architecture from base_model's own config.json; a different one would be
     * a silently ignored key */
    if (cfg->base_model_config && strcmp(cfg->base_model_config, cfg->base_model) != 0)
        return err_set("%s: key 'base_model_config': a config other than base_model's (%s) is not "
                       "supported: rlhf.c reads the architecture from base_model's config.json",
                       cfg->source, cfg->base_model_config);
    return 0;
}
