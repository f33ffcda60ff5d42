/* grpo/python_rollout.h in a build without Python (python/py_embed.h, PY_EMBED_ABSENT): a config
 * naming trl.rollout_func is refused before any training, saying which key needs Python. */
#include "grpo/python_rollout.h"

#include "common/error.h"
#include "python/py_embed.h"

#include <stdlib.h>
#include <string.h>

struct PythonRollout {
    int unused;
};

int python_rollout_open(PythonRollout **out, const char *spec, void *callable,
                        const TrainConfig *cfg, const Tokenizer *tok, int32_t eos_id,
                        int32_t pad_id) {
    (void)callable, (void)cfg, (void)tok, (void)eos_id, (void)pad_id;
    *out = NULL;
    return err_set("key 'trl.rollout_func': '%s' is a Python rollout function, " PY_EMBED_ABSENT,
                   spec);
}

void python_rollout_close(PythonRollout *pr) {
    free(pr);
}

int python_rollout_run(PythonRollout *pr, struct GrpoRollout *engine, const GrpoDataset *ds,
                       const size_t *idx, int n_prompts, int G, uint64_t stream,
                       const json_t *trainer_state, RolloutOutput *out) {
    (void)pr, (void)engine, (void)ds, (void)idx, (void)n_prompts, (void)G, (void)stream;
    (void)trainer_state;
    memset(out, 0, sizeof *out);
    return err_set("trl.rollout_func: " PY_EMBED_ABSENT);
}

void rollout_output_free(RolloutOutput *o, int rows) {
    if (o->comp) completions_free(o->comp, rows);
    free(o->comp);
    memset(o, 0, sizeof *o);
}
