/* POST /update_safetensors/ of `rlhf serve` (serve.h): a trainer's new weights, as a safetensors
 * file in the request body, copied into the served model between two generate() calls. This is
 * how `rlhf train` with vllm_mode: server keeps the server on the policy's weights (TRL sends
 * them over NCCL with /update_named_param/, which rlhf serve does not speak): HTTP works between
 * any two hosts, needs no shared file system, and safetensors is the format both sides already
 * read and write. */
#include "cli/serve.h"

#include "common/error.h"
#include "io/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int refuse(ServeError *err, int status, const char *fmt, const char *a, const char *b) {
    err->status = status;
    snprintf(err->message, sizeof err->message, fmt, a, b);
    err->param[0] = '\0';
    return -1;
}

/* Whether tensor t can replace parameter p: the same shape, a floating dtype. */
static int check_tensor(const SafetensorsTensor *t, const ParamInfo *p, ServeError *err) {
    char got[128] = "", want[128] = "";
    size_t n = 0;
    for (int d = 0; d < t->ndim && n < sizeof got - 24; d++)
        n += (size_t)snprintf(got + n, sizeof got - n, "%s%lld", d ? ", " : "",
                              (long long)t->shape[d]);
    n = 0;
    for (int d = 0; d < p->ndim && n < sizeof want - 24; d++)
        n += (size_t)snprintf(want + n, sizeof want - n, "%s%lld", d ? ", " : "",
                              (long long)p->shape[d]);
    if (strcmp(got, want) != 0) {
        char msg[300];
        snprintf(msg, sizeof msg, "tensor \"%.90s\" has shape [%s]", t->name, got);
        return refuse(err, 400, "%s; the served model's is [%s]", msg, want);
    }
    if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16 && t->dtype != ST_F64)
        return refuse(err, 400, "tensor \"%.90s\" is %s: expected F32, BF16, F16 or F64", t->name,
                      safetensors_dtype_name(t->dtype));
    return 0;
}

int serve_load_weights(const ServeContext *ctx, const char *body, size_t len, int *updated,
                       ServeError *err) {
    *updated = 0;
    Model *m = ctx->weights;
    if (!m) return refuse(err, 400, "%s%s", "this server does not take weight updates", "");
    if (m->params16)
        return refuse(err, 409, "%s%s",
                      "a server started with --bf16 keeps its weights in bf16 and does not take "
                      "weight updates: start it without --bf16",
                      "");
    if (m->lora)
        return refuse(err, 409, "%s%s",
                      "a server started with --adapter serves base + adapter; weight updates "
                      "would replace the base under it: start it without --adapter",
                      "");
    SafetensorsFile f;
    if (safetensors_open_buffer(&f, body, len, "the request body") != 0)
        return refuse(err, 400, "%.400s%s", err_msg(), "");
    int rc = f.n_tensors ? 0 : refuse(err, 400, "%s%s", "the safetensors body holds no tensor", "");
    /* every tensor is checked before any is copied: a refused request changes nothing */
    for (size_t i = 0; rc == 0 && i < f.n_tensors; i++) {
        const ParamInfo *p = model_find_param(m, f.tensors[i].name);
        rc = p ? check_tensor(&f.tensors[i], p, err)
               : refuse(err, 400, "tensor \"%.200s\" is not a parameter of the served model%s",
                        f.tensors[i].name, "");
    }
    for (size_t i = 0; rc == 0 && i < f.n_tensors; i++) {
        const ParamInfo *p = model_find_param(m, f.tensors[i].name);
        rc = safetensors_to_f32(&f.tensors[i], m->params + p->offset);
        if (rc != 0) refuse(err, 500, "%.400s%s", err_msg(), "");
    }
    if (rc == 0) *updated = (int)f.n_tensors;
    safetensors_close(&f);
    return rc;
}
