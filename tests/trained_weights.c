#include "trained_weights.h"

#include "common/error.h"
#include "harness.h"
#include "io/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void trained_weights_check(const char *name, const char *path, const Model *m,
                           const LoraAdapter *lora, double *worst_out) {
    SafetensorsFile f;
    CHECK(safetensors_open(&f, path) == 0, "%s", err_msg());
    int n = lora ? lora->n_info : m->n_param_tensors, bad = 0;
    double worst = 0;
    for (int p = 0; p < n; p++) {
        const char *pname = lora ? lora->info[p].name : m->param_info[p].name;
        size_t numel = lora ? lora->info[p].numel : m->param_info[p].numel;
        const float *mine =
            lora ? lora->params + lora->info[p].offset : m->params + m->param_info[p].offset;
        const SafetensorsTensor *t = safetensors_find(&f, pname);
        CHECK(t && (size_t)t->numel == numel, "%s: tensor %s in TRL's weights", name, pname);
        if (!t || (size_t)t->numel != numel) continue;
        float *want = malloc(numel * sizeof *want);
        safetensors_to_f32(t, want);
        double scale = 0, err = 0;
        for (size_t k = 0; k < numel; k++)
            scale = fmax(scale, fabs(want[k]));
        int outliers = 0;
        for (size_t k = 0; k < numel; k++) {
            double e = fabs(mine[k] - want[k]);
            err = fmax(err, e);
            outliers += e > 1e-4 * scale;
        }
        if (outliers > 2 || err > 1e-3 * scale) {
            bad++;
            printf("%s: %s: %d entries off by more than 1e-4, the worst %.3g of %.3g\n", name,
                   pname, outliers, err, scale);
        }
        worst = fmax(worst, scale > 0 ? err / scale : err);
        free(want);
    }
    CHECK(bad == 0, "%s: %d trained tensors differ from TRL's", name, bad);
    printf("%s: %d trained tensors match TRL's, worst %.2e of the largest entry\n", name, n, worst);
    *worst_out = worst;
    safetensors_close(&f);
}

double saved_weights_gap(const char *a_dir, const char *b_dir, double *scale) {
    Model a, b;
    double largest = 0, err = 0;
    if (model_load(&a, a_dir) != 0) {
        CHECK(0, "%s", err_msg());
        return INFINITY;
    }
    if (model_load(&b, b_dir) != 0 || b.n_params != a.n_params) {
        CHECK(0, "%s: %s", b_dir, err_msg());
        model_free(&a);
        return INFINITY;
    }
    for (size_t i = 0; i < a.n_params; i++)
        err = fmax(err, fabs(a.params[i] - b.params[i])),
        largest = fmax(largest, fabs(a.params[i]));
    model_free(&a);
    model_free(&b);
    if (scale) *scale = largest;
    return err;
}

double safetensors_files_gap(const char *what, const char *a_path, const char *b_path,
                             double *scale, double *worst_tensor) {
    SafetensorsFile fa, fb;
    if (safetensors_open(&fa, a_path) != 0) {
        CHECK(0, "%s: %s", what, err_msg());
        return INFINITY;
    }
    if (safetensors_open(&fb, b_path) != 0) {
        CHECK(0, "%s: %s", what, err_msg());
        safetensors_close(&fa);
        return INFINITY;
    }
    double worst = 0, gap = 0, largest_all = 0;
    CHECK(fa.n_tensors == fb.n_tensors, "%s: %zu and %zu tensors", what, fa.n_tensors,
          fb.n_tensors);
    for (size_t i = 0; i < fb.n_tensors; i++) {
        const SafetensorsTensor *tb = &fb.tensors[i], *ta = safetensors_find(&fa, tb->name);
        CHECK(ta && ta->numel == tb->numel, "%s: tensor %s", what, tb->name);
        if (!ta || ta->numel != tb->numel) continue;
        float *x = malloc((size_t)ta->numel * sizeof *x),
              *y = malloc((size_t)tb->numel * sizeof *y);
        CHECK(safetensors_to_f32(ta, x) == 0 && safetensors_to_f32(tb, y) == 0, "%s", err_msg());
        double largest = 0, err = 0;
        for (int64_t k = 0; k < tb->numel; k++)
            largest = fmax(largest, fabs(y[k])), err = fmax(err, fabs((double)x[k] - y[k]));
        if (largest > 0) worst = fmax(worst, err / largest);
        gap = fmax(gap, err), largest_all = fmax(largest_all, largest);
        free(x), free(y);
    }
    safetensors_close(&fa), safetensors_close(&fb);
    *scale = largest_all;
    if (worst_tensor) *worst_tensor = worst;
    return gap;
}
