/* grpo/vllm_server.h in a build without libcurl (RLHF_CURL=OFF, or none found): vllm_mode:
 * server is refused before training, saying what to install. */
#include "grpo/vllm_server.h"

#include "common/error.h"

int vllm_server_open(VllmServer **out, const GrpoConfig *g, FILE *log) {
    (void)log;
    *out = NULL;
    return err_set("key 'trl.vllm_mode': server (%s) needs rlhf.c built with libcurl, its HTTP "
                   "client: apt-get install libcurl4-openssl-dev (scripts/setup-deps.sh), then "
                   "rebuild; or set use_vllm: false to generate in-process",
                   g->vllm_server_url);
}

void vllm_server_close(VllmServer *s) {
    (void)s;
}

int vllm_server_sync(VllmServer *s, const Model *m, int64_t version) {
    (void)s, (void)m, (void)version;
    return err_set("key 'trl.vllm_mode': server needs rlhf.c built with libcurl");
}

int vllm_server_generate(VllmServer *s, const int32_t *const *prompts, const int *prompt_lens,
                         int n_prompts, const GenerateOptions *opt, Completion *out) {
    (void)s, (void)prompts, (void)prompt_lens, (void)n_prompts, (void)opt, (void)out;
    return err_set("key 'trl.vllm_mode': server needs rlhf.c built with libcurl");
}
