/* AdamW + clipping + schedules against torch / transformers (tests/fixtures/optimizer, made by
 * tools/reference/make_optimizer_fixtures.py): weight-decay groups as Trainer forms them, the
 * schedules' multipliers at every step, and 5 steps of AdamW with clipping on a fixture model's
 * parameters, compared on the pre-clip gradient norm, the lr and the final parameters. */
#include "common/error.h"
#include "common/json_util.h"
#include "harness.h"
#include "io/safetensors.h"
#include "kernels/cpu/gemm_bf16.h"
#include "model/model.h"
#include "train/optimizer.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static json_t *load_json(const char *rel) {
    json_t *j = NULL;
    if (json_load_path(harness_source_path(rel), &j) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        exit(1);
    }
    return j;
}

static void test_schedules(void) {
    json_t *j = load_json("tests/fixtures/optimizer/schedules.json");
    int64_t total = json_integer_value(json_object_get(j, "total"));
    int64_t warmup = json_integer_value(json_object_get(j, "warmup"));
    const char *name;
    json_t *factors;
    json_object_foreach(json_object_get(j, "factors"), name, factors) {
        LrScheduleType type;
        CHECK(lr_schedule_parse(name, &type) == 0, "schedule %s", name);
        for (size_t step = 0; step < json_array_size(factors); step++) {
            double want = json_number_value(json_array_get(factors, step));
            double got = lr_schedule_factor(type, (int64_t)step, warmup, total);
            CHECK(fabs(got - want) < 1e-12, "%s step %zu: %.15g vs %.15g", name, step, got, want);
        }
    }
    LrScheduleType t;
    CHECK(lr_schedule_parse("polynomial", &t) != 0, "unknown schedule refused");
    json_decref(j);
}

/* The synthetic gradient of make_optimizer_fixtures.py at step k. */
static void synthetic_grads(const Model *m, int64_t k, float scale, float *grads) {
    for (int p = 0; p < m->n_param_tensors; p++)
        for (size_t i = 0; i < m->param_info[p].numel; i++)
            grads[m->param_info[p].offset + i] =
                (float)sin(0.37 * (double)(i + 1) + 1.3 * (double)k + 0.11 * p) * scale;
}

static bool name_listed(json_t *list, const char *name) {
    for (size_t i = 0; i < json_array_size(list); i++)
        if (strcmp(name, json_string_value(json_array_get(list, i))) == 0) return true;
    return false;
}

/* The fixture's AdamW hyper-parameters. */
static AdamWConfig case_config(json_t *j, bool eight_bit) {
    json_t *betas = json_object_get(j, "betas");
    return (AdamWConfig){json_number_value(json_array_get(betas, 0)),
                         json_number_value(json_array_get(betas, 1)),
                         json_number_value(json_object_get(j, "eps")),
                         json_number_value(json_object_get(j, "weight_decay")), eight_bit};
}

/* The fixture's steps: synthetic gradients, the pre-clip norm and the lr checked against the
 * fixture's at every step, clipping, then one AdamW step. */
static void run_steps(json_t *j, Model *m, const ParamSpan *spans, AdamW *opt, LrScheduleType type,
                      int64_t warmup) {
    int64_t steps = json_integer_value(json_object_get(j, "steps"));
    double base_lr = json_number_value(json_object_get(j, "lr"));
    double max_norm = json_number_value(json_object_get(j, "max_grad_norm"));
    float *grads = malloc(m->n_params * sizeof *grads);
    for (int64_t k = 0; k < steps; k++) {
        float scale =
            (float)json_number_value(json_array_get(json_object_get(j, "scales"), (size_t)k));
        synthetic_grads(m, k, scale, grads);
        double norm = grad_global_norm(backend_cpu(), grads, spans, m->n_param_tensors);
        double want_norm =
            json_number_value(json_array_get(json_object_get(j, "grad_norm_per_step"), (size_t)k));
        CHECK(harness_close(norm, want_norm, 1e-5, 0), "step %lld grad_norm %.8g vs %.8g",
              (long long)k, norm, want_norm);
        grad_clip(backend_cpu(), grads, spans, m->n_param_tensors, max_norm, norm);
        double lr = base_lr * lr_schedule_factor(type, k, warmup, steps);
        double want_lr =
            json_number_value(json_array_get(json_object_get(j, "lr_per_step"), (size_t)k));
        CHECK(fabs(lr - want_lr) <= 1e-12, "step %lld lr %.12g vs %.12g", (long long)k, lr,
              want_lr);
        /* bf16 products' packed copy of a weight (kernels/cpu/gemm_bf16_cache.c) must not
         * outlive the step that changed it: the next lookup gives the packing of the new
         * values (a fresh packing's bits), repacked into the buffer it had (invariant 6) */
        const ModelConfig *c = &m->cfg;
        int out = c->n_heads * c->head_dim, in = c->hidden_size;
        gemm_bf16_cache_clear();
        const uint16_t *before = bf16_weight_packed(m->layers[0].wq, NULL, out, in, true)->data;
        size_t cached = gemm_bf16_cache_bytes();
        CHECK(cached > 0, "step %lld: wq not cached", (long long)k);
        adamw_step(opt, backend_cpu(), m->params, grads, lr);
        const Bf16PackedB *after = bf16_weight_packed(m->layers[0].wq, NULL, out, in, true);
        Bf16PackedB fresh;
        bf16_pack_b(&fresh,
                    (Bf16Source){.f32 = m->layers[0].wq, .row_stride = 1, .col_stride = (size_t)in},
                    in, out);
        CHECK(memcmp(after->data, fresh.data,
                     (size_t)fresh.depth_padded * fresh.cols_padded * sizeof *fresh.data) == 0,
              "step %lld: wq's packing outlived the AdamW step", (long long)k);
        CHECK(after->data == before && gemm_bf16_cache_bytes() == cached,
              "step %lld: wq repacked into a new buffer, not its own", (long long)k);
        bf16_packed_b_free(&fresh);
    }
    free(grads);
}

/* How many of the model's parameters differ from the fixture's (1e-4 relative, 1e-6 absolute;
 * a tensor missing from the fixture counts once); *compared gets how many were compared. */
static int params_differ(const SafetensorsFile *f, const Model *m, size_t *compared) {
    int bad = 0;
    *compared = 0;
    for (int p = 0; p < m->n_param_tensors; p++) {
        const SafetensorsTensor *t = safetensors_find(f, m->param_info[p].name);
        if (!t) {
            bad++;
            continue;
        }
        float *want = malloc((size_t)t->numel * sizeof *want);
        safetensors_to_f32(t, want);
        for (size_t i = 0; i < m->param_info[p].numel; i++, (*compared)++)
            bad += !harness_close(m->params[m->param_info[p].offset + i], want[i], 1e-4, 1e-6);
        free(want);
    }
    return bad;
}

static void run_case(const char *case_name) {
    char rel[512];
    snprintf(rel, sizeof rel, "tests/fixtures/optimizer/%s.json", case_name);
    json_t *j = load_json(rel);
    char model_rel[512];
    snprintf(model_rel, sizeof model_rel, "tests/fixtures/models/%s",
             json_string_value(json_object_get(j, "model")));
    Model m;
    CHECK(model_load(&m, harness_source_path(model_rel)) == 0, "%s", err_msg());

    /* the decay groups Trainer formed, and our parameter order = named_parameters order */
    json_t *names = json_object_get(j, "param_names"), *decay = json_object_get(j, "decay_names");
    CHECK((int)json_array_size(names) == m.n_param_tensors, "parameter count");
    ParamSpan *spans = calloc((size_t)m.n_param_tensors, sizeof *spans);
    for (int p = 0; p < m.n_param_tensors; p++) {
        const char *name = m.param_info[p].name;
        CHECK(strcmp(name, json_string_value(json_array_get(names, (size_t)p))) == 0,
              "parameter %d: %s", p, name);
        bool want = name_listed(decay, name);
        CHECK(param_gets_weight_decay(name) == want, "%s: weight decay %d, Trainer says %d", name,
              !want, want);
        spans[p] = (ParamSpan){m.param_info[p].offset, m.param_info[p].numel, want, false};
    }

    AdamWConfig cfg = case_config(j, false);
    AdamW opt;
    CHECK(adamw_init(&opt, &cfg, spans, m.n_param_tensors) == 0, "%s", err_msg());
    LrScheduleType type;
    CHECK(lr_schedule_parse(json_string_value(json_object_get(j, "schedule")), &type) == 0,
          "schedule");
    int64_t steps = json_integer_value(json_object_get(j, "steps"));
    double ws = json_number_value(json_object_get(j, "warmup_steps"));
    int64_t warmup = ws >= 1 ? (int64_t)ws : lr_warmup_steps_from_ratio(ws, steps);
    CHECK(warmup == json_integer_value(json_object_get(j, "warmup")), "warmup steps %lld",
          (long long)warmup);
    run_steps(j, &m, spans, &opt, type, warmup);

    snprintf(rel, sizeof rel, "tests/fixtures/optimizer/%s.safetensors", case_name);
    SafetensorsFile f;
    CHECK(safetensors_open(&f, harness_source_path(rel)) == 0, "%s", err_msg());
    size_t compared;
    int bad = params_differ(&f, &m, &compared);
    CHECK(bad == 0 && compared == m.n_params, "%s: %d of %zu parameters differ from torch",
          case_name, bad, compared);
    printf("%s: %zu parameters match torch after %lld steps\n", case_name, compared,
           (long long)steps);
    safetensors_close(&f);
    free(spans);
    adamw_free(&opt);
    model_free(&m);
    json_decref(j);
}

/* q8_map_code starts from a per-bucket count and two compares, q8_map_codes does the same eight
 * at a time: both must equal the plain count of bounds below x, at every bound, one ulp either
 * side, at random values of every magnitude, and one ulp past +-1 (a scaled value may land
 * there: it gets the code of +-1). */
static void test_map_codes(void) {
    enum { N_RANDOM = 200000, N = 3 * (255 + N_RANDOM) + 8 };
    float *x = malloc(N * sizeof *x);
    uint8_t *codes = malloc(N);
    for (int sign = 0; sign < 2; sign++) {
        Q8Map map;
        q8_map_dynamic(&map, sign == 0);
        size_t n = 0;
        uint64_t state = 12345;
        for (int i = 0; i < 255 + N_RANDOM; i++) {
            float v;
            if (i < 255) {
                v = map.bound[i];
            } else {
                double u = harness_uniform(&state);
                double mag = pow(10.0, -12.0 * u); /* 1e-12 .. 1 */
                v = (float)((state >> 3) & 1 ? -mag : mag);
            }
            x[n++] = v;
            x[n++] = fmaxf(nextafterf(v, -2.0f), -1.0f);
            x[n++] = fminf(nextafterf(v, 2.0f), 1.0f);
        }
        const float edges[] = {0.0f,
                               -0.0f,
                               1.0f,
                               -1.0f,
                               1e-30f,
                               -1e-30f,
                               nextafterf(1.0f, 2.0f),
                               nextafterf(-1.0f, -2.0f)};
        for (int k = 0; k < 8; k++)
            x[n++] = edges[k];
        q8_map_codes(&map, x, 1.0f, n, codes);
        int bad_one = 0, bad_many = 0;
        for (size_t i = 0; i < n; i++) {
            unsigned want = 0;
            while (want < 255 && map.bound[want] < x[i])
                want++;
            bad_one += q8_map_code(&map, x[i]) != want;
            bad_many += codes[i] != want;
        }
        CHECK(bad_one == 0 && bad_many == 0,
              "%s map: %d (one at a time) and %d (eight at a time) of %zu codes differ from "
              "counting the bounds below",
              sign == 0 ? "signed" : "unsigned", bad_one, bad_many, n);
    }
    free(x);
    free(codes);
}

/* bitsandbytes' maps as our code makes them against the ones its optimizer used. */
static void check_maps(const SafetensorsFile *f, const AdamW *opt) {
    const char *keys[2] = {"qmap1", "qmap2"};
    for (int k = 0; k < 2; k++) {
        const SafetensorsTensor *t = safetensors_find(f, keys[k]);
        CHECK(t && t->numel == 256, "%s in the fixture", keys[k]);
        if (!t) continue;
        float want[256];
        safetensors_to_f32(t, want);
        int differ = 0;
        for (int i = 0; i < 256; i++)
            differ += opt->maps[k].value[i] != want[i];
        CHECK(differ == 0, "%s: %d of 256 values differ from bitsandbytes'", keys[k], differ);
    }
}

/* The 8-bit moments of span p against bitsandbytes' state1/state2 codes and absmax1/absmax2. */
static int compare_codes(const SafetensorsFile *f, const AdamW *opt, int p, const char *name,
                         size_t *n_codes) {
    MomentTensor mt[4];
    int n = adamw_span_moments(opt, p, mt), bad = 0;
    for (int k = 0; k < n; k++) {
        char key[256];
        snprintf(key, sizeof key, "%s.%s", mt[k].key, name);
        const SafetensorsTensor *t = safetensors_find(f, key);
        if (!t || (size_t)t->numel != mt[k].numel) {
            CHECK(0, "%s: missing or of another size in the fixture", key);
            continue;
        }
        if (mt[k].codes) {
            const uint8_t *want = t->data, *got = mt[k].data;
            for (size_t i = 0; i < mt[k].numel; i++)
                bad += got[i] != want[i];
            *n_codes += mt[k].numel;
        } else {
            float *want = malloc(mt[k].numel * sizeof *want);
            safetensors_to_f32(t, want);
            for (size_t i = 0; i < mt[k].numel; i++)
                bad += !harness_close(((float *)mt[k].data)[i], want[i], 1e-5, 0);
            free(want);
        }
    }
    return bad;
}

/* bitsandbytes' 8-bit AdamW as Trainer builds it for optim="adamw_bnb_8bit"
 * (tests/fixtures/optimizer/adamw8bit, make_adamw8bit_fixtures.py): which tensors get 8-bit
 * moments, the quantisation maps, the codes and scales after 5 steps, and the parameters. */
static void run_8bit_case(void) {
    json_t *j = load_json("tests/fixtures/optimizer/adamw8bit/case.json");
    Model m;
    CHECK(model_load(&m, harness_source_path("tests/fixtures/optimizer/adamw8bit/model")) == 0,
          "%s", err_msg());
    json_t *decay = json_object_get(j, "decay_names"),
           *eight_bit = json_object_get(j, "eight_bit_names");
    ParamSpan *spans = calloc((size_t)m.n_param_tensors, sizeof *spans);
    for (int p = 0; p < m.n_param_tensors; p++) {
        const char *name = m.param_info[p].name;
        CHECK(param_gets_weight_decay(name) == name_listed(decay, name), "%s: decay", name);
        spans[p] = (ParamSpan){m.param_info[p].offset, m.param_info[p].numel,
                               param_gets_weight_decay(name), param_is_embedding(name)};
    }
    AdamWConfig cfg = case_config(j, true);
    AdamW opt;
    CHECK(adamw_init(&opt, &cfg, spans, m.n_param_tensors) == 0, "%s", err_msg());
    for (int p = 0; p < m.n_param_tensors; p++) {
        bool ours = opt.moments[p].m == NULL, theirs = name_listed(eight_bit, m.param_info[p].name);
        CHECK(ours == theirs, "%s: 8-bit moments %d, bitsandbytes says %d", m.param_info[p].name,
              ours, theirs);
    }

    int64_t steps = json_integer_value(json_object_get(j, "steps"));
    run_steps(j, &m, spans, &opt, LR_COSINE,
              json_integer_value(json_object_get(j, "warmup_steps")));

    SafetensorsFile f;
    CHECK(safetensors_open(&f, harness_source_path("tests/fixtures/optimizer/adamw8bit/"
                                                   "after.safetensors")) == 0,
          "%s", err_msg());
    check_maps(&f, &opt);
    size_t compared, n_codes = 0;
    int bad = params_differ(&f, &m, &compared), bad_codes = 0;
    for (int p = 0; p < m.n_param_tensors; p++)
        if (!opt.moments[p].m)
            bad_codes += compare_codes(&f, &opt, p, m.param_info[p].name, &n_codes);
    CHECK(bad == 0 && compared == m.n_params, "%d of %zu parameters differ from bitsandbytes'", bad,
          compared);
    CHECK(bad_codes == 0 && n_codes > 0, "%d of %zu moment codes or scales differ", bad_codes,
          n_codes);
    printf("adamw8bit: %zu parameters and %zu 8-bit codes match bitsandbytes after %lld steps\n",
           compared, n_codes, (long long)steps);
    safetensors_close(&f);
    free(spans);
    adamw_free(&opt);
    model_free(&m);
    json_decref(j);
}

/* The moments start from calloc_written's zeros: all of them, over several of its 1 MiB chunks
 * and a tail, also where the allocator hands back memory it had given out dirty. */
static void test_calloc_written(void) {
    size_t sizes[] = {1, 100003, (5u << 20) / 2 + 7};
    for (int round = 0; round < 2; round++)
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            unsigned char *dirty = malloc(sizes[k]);
            memset(dirty, 0xab, sizes[k]);
            free(dirty);
            unsigned char *p = calloc_written(sizes[k], 1);
            CHECK(p != NULL, "calloc_written(%zu)", sizes[k]);
            size_t nonzero = 0;
            for (size_t i = 0; p && i < sizes[k]; i++)
                nonzero += p[i] != 0;
            CHECK(nonzero == 0, "%zu of %zu bytes not zero", nonzero, sizes[k]);
            free(p);
        }
    CHECK(calloc_written(SIZE_MAX / 2, 4) == NULL, "an overflowing size is refused");
}

/* The trainer's clip folded into AdamW's read (adamw_step_scaled with grad_clip_coef) against
 * the two passes it replaced (grad_clip, then adamw_step), fp32 and 8-bit moments, steps with
 * and without clipping: parameters and moments equal bit for bit, the gradients unclipped. */
static void test_clip_folded(bool eight_bit) {
    ParamSpan spans[3] = {{0, 1000, true, false},
                          {1000, Q8_MIN_NUMEL + 300, true, false}, /* 8-bit moments if asked */
                          {1000 + Q8_MIN_NUMEL + 300, 77, false, false}};
    size_t n = spans[2].offset + spans[2].numel;
    AdamWConfig cfg = {0.9, 0.999, 1e-8, 0.01, eight_bit};
    AdamW two_pass, folded;
    CHECK(adamw_init(&two_pass, &cfg, spans, 3) == 0 && adamw_init(&folded, &cfg, spans, 3) == 0,
          "%s", err_msg());
    float *p_two = malloc(n * sizeof *p_two), *p_fold = malloc(n * sizeof *p_fold);
    float *g = malloc(n * sizeof *g), *g_two = malloc(n * sizeof *g_two);
    for (size_t i = 0; i < n; i++)
        p_two[i] = p_fold[i] = (float)cos(0.7 * (double)i);
    const Backend *be = backend_cpu();
    int clipped = 0;
    for (int k = 0; k < 4; k++) {
        for (size_t i = 0; i < n; i++) /* steps 0 and 2 far above max_norm 1, 1 and 3 below */
            g[i] = (float)sin(0.37 * (double)i + k) * (k % 2 ? 1e-3f : 0.5f);
        memcpy(g_two, g, n * sizeof *g);
        double norm = grad_global_norm(be, g, spans, 3);
        float coef = grad_clip_coef(1.0, norm);
        clipped += coef < 1.0f;
        grad_clip(be, g_two, spans, 3, 1.0, norm);
        adamw_step(&two_pass, be, p_two, g_two, 1e-3);
        adamw_step_scaled(&folded, be, p_fold, g, 1e-3, coef);
        CHECK(fabs(g[5] - sin(0.37 * 5 + k) * (k % 2 ? 1e-3 : 0.5)) < 1e-6,
              "step %d: the gradients were scaled in place", k);
    }
    CHECK(clipped == 2, "%d of 4 steps clipped, want 2", clipped);
    CHECK(memcmp(p_two, p_fold, n * sizeof *p_two) == 0,
          "%s: parameters differ between the folded clip and the separate pass",
          eight_bit ? "8-bit" : "fp32");
    for (int s = 0; s < 3; s++) {
        MomentTensor a[4], b[4];
        int na = adamw_span_moments(&two_pass, s, a), nb = adamw_span_moments(&folded, s, b);
        CHECK(na == nb && (na == 4) == (eight_bit && s == 1), "span %d: %d moment tensors", s, na);
        for (int t = 0; t < na && na == nb; t++)
            CHECK(memcmp(a[t].data, b[t].data, moment_tensor_bytes(&a[t])) == 0,
                  "%s span %d: %s differs", eight_bit ? "8-bit" : "fp32", s, a[t].key);
    }
    adamw_free(&two_pass), adamw_free(&folded);
    free(p_two), free(p_fold), free(g), free(g_two);
}

/* The gradient's sum of squares (what grad_norm is the root of) over many of its blocks and a
 * ragged tail: the same bits with 1, 2 and 3 threads (its order is fixed by the length alone),
 * and within 1e-14 of a long double sum. */
static void test_sum_squares_threads(void) {
    size_t n = 5 * 8192 * 7 + 4099;
    float *g = malloc(n * sizeof *g);
    long double want = 0;
    for (size_t i = 0; i < n; i++) {
        g[i] = (float)(sin(0.91 * (double)i) * (1.0 + (double)(i % 977)));
        want += (long double)g[i] * g[i];
    }
    const Backend *be = backend_cpu();
    int threads = omp_get_max_threads();
    double got[3];
    for (int t = 1; t <= 3; t++) {
        omp_set_num_threads(t);
        got[t - 1] = be->sum_squares(be, g, n);
    }
    omp_set_num_threads(threads);
    CHECK(memcmp(&got[0], &got[1], sizeof got[0]) == 0 &&
              memcmp(&got[0], &got[2], sizeof got[0]) == 0,
          "sum_squares depends on the thread count: %.17g %.17g %.17g", got[0], got[1], got[2]);
    CHECK(fabs(got[0] - (double)want) <= 1e-14 * (double)want, "sum_squares %.17g, want %.17Lg",
          got[0], want);
    free(g);
}

/* sum_squares's documented order (kernels.h, adamw.c), walked value by value: each block of 8192
 * values summed into 16 double lanes, value i of the block into lane i mod 16, the lanes folded
 * pairwise (lane k += lane k + width, width 8, 4, 2, 1), the blocks' sums added in order. */
static double sum_squares_walked(const float *g, size_t n) {
    double total = 0.0;
    for (size_t b0 = 0; b0 < n; b0 += 8192) {
        double lane[16] = {0};
        for (size_t i = b0; i < n && i < b0 + 8192; i++)
            lane[(i - b0) % 16] += (double)g[i] * g[i];
        for (int width = 8; width >= 1; width /= 2)
            for (int k = 0; k < width; k++)
                lane[k] += lane[k + width];
        total += lane[0];
    }
    return total;
}

/* The same bits as that walk, at 1 and 2 threads, on lengths that end inside the first block,
 * at a group of 8 blocks' end (the blocks read side by side), one block and a few values past
 * it, and inside a group. */
static void test_sum_squares_order(void) {
    static const size_t lengths[] = {
        1, 17, 8192, 8193, 8 * 8192, 9 * 8192, 8 * 8192 + 5, 16 * 8192 + 8191, 35 * 8192 + 4099};
    size_t most = 35 * 8192 + 4099;
    float *g = malloc(most * sizeof *g);
    for (size_t i = 0; i < most; i++)
        g[i] = (float)(cos(1.37 * (double)i) * (1.0 + (double)(i % 331)));
    const Backend *be = backend_cpu();
    int threads = omp_get_max_threads();
    for (int t = 1; t <= 2; t++) {
        omp_set_num_threads(t);
        for (size_t k = 0; k < sizeof lengths / sizeof lengths[0]; k++) {
            double got = be->sum_squares(be, g, lengths[k]),
                   want = sum_squares_walked(g, lengths[k]);
            CHECK(memcmp(&got, &want, sizeof got) == 0,
                  "sum_squares of %zu values at %d threads: %.17g, the documented order %.17g",
                  lengths[k], t, got, want);
        }
    }
    omp_set_num_threads(threads);
    free(g);
}

int main(void) {
    test_calloc_written();
    test_sum_squares_threads();
    test_sum_squares_order();
    test_clip_folded(false);
    test_clip_folded(true);
    test_schedules();
    run_case("adamw_cosine_clip");
    run_case("adamw_linear_qknorm");
    test_map_codes();
    run_8bit_case();
    return harness_finish("test_optimizer");
}
