/* Gradient parity with PyTorch autograd: for the fixture batch, the SFT-style loss (mean
 * negative log-prob of every real target token) and the gradient of every parameter, against
 * tests/fixtures/models/<name>/grads.safetensors (tools/reference/make_grad_fixtures.py).
 * Each gradient tensor must match to 1e-4 of its largest magnitude (elementwise relative error
 * is meaningless for entries that are nearly zero). Usage: test_grad_parity FIXTURE_DIR */
#include "common/error.h"
#include "common/json_util.h"
#include "harness.h"
#include "io/safetensors.h"
#include "model/backward.h"
#include "reference_fixture.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The largest magnitude of any gradient in the reference file. */
static double largest_gradient(const SafetensorsFile *ref) {
    double top = 0;
    for (size_t j = 0; j < ref->n_tensors; j++) {
        const SafetensorsTensor *t = &ref->tensors[j];
        float *v = malloc((size_t)t->numel * sizeof *v);
        safetensors_to_f32(t, v);
        for (int64_t i = 0; i < t->numel; i++)
            top = fmax(top, fabs(v[i]));
        free(v);
    }
    return top;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s FIXTURE_DIR\n", argv[0]);
        return 2;
    }
    char path[4096];
    Model m;
    if (model_load(&m, argv[1]) != 0) {
        fprintf(stderr, "load: %s\n", err_msg());
        return 1;
    }
    ReferenceFixture f;
    reference_fixture_load(&f, argv[1]);
    TokenBatch batch = {
        .batch = f.batch, .t_len = f.t_len, .tokens = f.tokens, .attn_mask = f.mask};
    size_t n = (size_t)f.batch * f.t_len;

    ForwardTape tape = {0};
    CHECK(model_forward_tape(&m, &batch, false, &tape) == 0, "forward: %s", err_msg());
    float *logp = calloc(n, sizeof *logp), *dlogp = calloc(n, sizeof *dlogp);
    model_tape_logprobs(&m, &tape, NULL, logp);
    int count = 0;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        if (!f.mask[i] || i % (size_t)f.t_len == 0) continue;
        sum += logp[i];
        count++;
    }
    for (size_t i = 0; i < n; i++)
        if (f.mask[i] && i % (size_t)f.t_len != 0) dlogp[i] = -1.0f / (float)count;
    double loss = -sum / count;

    snprintf(path, sizeof path, "%s/grads.json", argv[1]);
    json_t *meta;
    CHECK(json_load_path(path, &meta) == 0, "%s", err_msg());
    double want_loss = json_number_value(json_object_get(meta, "loss"));
    CHECK(harness_close(loss, want_loss, 1e-4, 0), "loss %.7f vs PyTorch %.7f", loss, want_loss);
    json_decref(meta);

    float *grads = calloc(m.n_params, sizeof *grads);
    CHECK(model_backward(&m, &tape, NULL, dlogp, grads, NULL) == 0, "backward: %s", err_msg());

    snprintf(path, sizeof path, "%s/grads.safetensors", argv[1]);
    SafetensorsFile ref;
    CHECK(safetensors_open(&ref, path) == 0, "%s", err_msg());
    CHECK(ref.n_tensors == (size_t)m.n_param_tensors, "%zu gradient tensors for %d parameters",
          ref.n_tensors, m.n_param_tensors);
    /* A gradient that is zero in exact arithmetic (the k_proj bias of a layer without RoPE: it
     * adds q·b to every score of a query alike, which the softmax cancels) is roundoff in PyTorch
     * and here; such a tensor (largest entry below ZERO_GRAD of the largest gradient anywhere)
     * must be as small here, not equal to PyTorch's noise. */
    const double ZERO_GRAD = 1e-6;
    double top = largest_gradient(&ref);
    double worst = 0;
    for (int p = 0; p < m.n_param_tensors; p++) {
        const ParamInfo *info = &m.param_info[p];
        const SafetensorsTensor *t = safetensors_find(&ref, info->name);
        CHECK(t && (size_t)t->numel == info->numel, "gradient of %s present", info->name);
        if (!t || (size_t)t->numel != info->numel) continue;
        float *want = malloc(info->numel * sizeof *want);
        safetensors_to_f32(t, want);
        double scale = 0, err = 0;
        for (size_t i = 0; i < info->numel; i++)
            scale = fmax(scale, fabs(want[i]));
        for (size_t i = 0; i < info->numel; i++)
            err = fmax(err, fabs(grads[info->offset + i] - want[i]));
        CHECK(scale > 0, "%s: PyTorch gradient is all zero", info->name);
        if (scale <= ZERO_GRAD * top) {
            CHECK(err <= ZERO_GRAD * top,
                  "%s: PyTorch's gradient is roundoff (%.3g), this one is off by %.3g", info->name,
                  scale, err);
            free(want);
            continue;
        }
        CHECK(err <= 1e-4 * scale, "%s: max |diff| %.3g vs largest gradient %.3g (ratio %.2e)",
              info->name, err, scale, err / scale);
        worst = fmax(worst, scale > 0 ? err / scale : 0);
        free(want);
    }
    /* gradient checkpointing regenerates the same activations: bitwise the same gradients */
    ForwardTape light = {0};
    CHECK(model_forward_tape(&m, &batch, true, &light) == 0, "forward (recompute): %s", err_msg());
    /* `tape`'s backward took the lm_head's log-sum-exp from its model_tape_logprobs; here the
     * last log-prob pass scored other cells (every second one), so the backward below must
     * recompute it (TapeLse invariant 2), and both must give the same bits */
    uint8_t *half = calloc(n, 1);
    for (size_t i = 0; i < n; i += 2)
        half[i] = 1;
    float *logp_half = calloc(n, sizeof *logp_half);
    model_tape_logprobs(&m, &light, half, logp_half);
    free(logp_half);
    free(half);
    float *grads2 = calloc(m.n_params, sizeof *grads2);
    CHECK(model_backward(&m, &light, NULL, dlogp, grads2, NULL) == 0, "backward (recompute): %s",
          err_msg());
    CHECK(memcmp(grads, grads2, m.n_params * sizeof *grads) == 0,
          "gradient checkpointing gives bitwise identical gradients");
    free(grads2);
    forward_tape_free(&light);
    printf("loss %.7f (PyTorch %.7f); %d gradient tensors, worst max|diff|/max|grad| %.2e\n", loss,
           want_loss, m.n_param_tensors, worst);
    safetensors_close(&ref);
    free(grads);
    free(logp);
    free(dlogp);
    forward_tape_free(&tape);
    reference_fixture_free(&f);
    model_free(&m);
    return harness_finish("test_grad_parity");
}
