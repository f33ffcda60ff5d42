#include "model/lora.h"

#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "common/rng.h"
#include "common/torch_generator.h"
#include "io/safetensors.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const module_names[LORA_N_MODULES] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

const char *lora_module_name(LoraModule m) {
    return module_names[m];
}

static void module_dims(const ModelConfig *c, LoraModule m, int *in, int *out) {
    int H = c->hidden_size, I = c->intermediate_size, q = c->n_heads * c->head_dim,
        kv = c->n_kv_heads * c->head_dim;
    const int dims[LORA_N_MODULES][2] = {{H, q}, {H, kv}, {H, kv}, {q, H}, {H, I}, {H, I}, {I, H}};
    *in = dims[m][0];
    *out = dims[m][1];
}

/* PEFT's rule for a list of targets: the full name equals an entry or ends with "." + entry. */
static bool matches(const char *full, const char *entry) {
    size_t a = strlen(full), b = strlen(entry);
    if (strcmp(full, entry) == 0) return true;
    return a > b && full[a - b - 1] == '.' && strcmp(full + a - b, entry) == 0;
}

static bool targeted(const char *full, const char *const *targets, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(targets[i], "all-linear") == 0 || matches(full, targets[i])) return true;
    return false;
}

/* A module PEFT adapts: its name under the layer, and the layer's linears it is made of. A fused
 * module (Phi-3's qkv_proj, gate_up_proj) stacks `parts` consecutive linears by rows; PEFT gives
 * it one A (r, in) and one B (sum of the parts' outputs, r), so each part is adapted with the
 * shared A and its own rows of B. */
typedef struct {
    const char *name;
    LoraModule first;
    int parts;
} PeftModule;

static const PeftModule separate_modules[] = {
    {"self_attn.q_proj", LORA_Q, 1}, {"self_attn.k_proj", LORA_K, 1},
    {"self_attn.v_proj", LORA_V, 1}, {"self_attn.o_proj", LORA_O, 1},
    {"mlp.gate_proj", LORA_GATE, 1}, {"mlp.up_proj", LORA_UP, 1},
    {"mlp.down_proj", LORA_DOWN, 1}};
/* in Phi-3's registration order (o_proj before qkv_proj) */
static const PeftModule fused_modules[] = {{"self_attn.o_proj", LORA_O, 1},
                                           {"self_attn.qkv_proj", LORA_Q, 3},
                                           {"mlp.gate_up_proj", LORA_GATE, 2},
                                           {"mlp.down_proj", LORA_DOWN, 1}};

static const PeftModule *peft_modules(const ModelConfig *cfg, int *n) {
    *n = cfg->fused_qkv_mlp ? 4 : 7;
    return cfg->fused_qkv_mlp ? fused_modules : separate_modules;
}

/* Lays out the adapter for the targeted modules (A and B left uninitialised).
 * Invariants: 1. info holds A then B of each targeted module, layer by layer, modules in
 * peft_modules order; 2. every part of a targeted module has a LoraLinear, A the module's A and
 * B its rows of the module's B. */
static int lora_layout(LoraAdapter *a, const ModelConfig *cfg, int r, double alpha, bool rslora,
                       double dropout, const char *const *targets, int n_targets) {
    memset(a, 0, sizeof *a);
    if (r <= 0) return err_set("lora_r must be positive, got %d", r);
    if (n_targets == 0) return err_set("lora_target_modules is empty");
    a->r = r;
    a->alpha = alpha;
    a->rslora = rslora;
    a->scaling = (float)(rslora ? alpha / sqrt((double)r) : alpha / r);
    a->dropout = dropout;
    a->enabled = true;
    a->fused = cfg->fused_qkv_mlp;
    a->n_layers = cfg->n_layers;
    a->linears = xcalloc((size_t)cfg->n_layers * LORA_N_MODULES, sizeof *a->linears);
    a->info = xcalloc((size_t)cfg->n_layers * LORA_N_MODULES * 2, sizeof *a->info);
    int n_modules;
    const PeftModule *modules = peft_modules(cfg, &n_modules);
    size_t total = 0;
    for (int l = 0; l < cfg->n_layers; l++) {
        for (int k = 0; k < n_modules; k++) {
            const PeftModule *pm = &modules[k];
            char full[96];
            snprintf(full, sizeof full, "model.layers.%d.%s", l, pm->name);
            if (!targeted(full, targets, n_targets)) continue;
            int in = 0, out = 0;
            for (int part = 0; part < pm->parts; part++) {
                LoraLinear *lin = &a->linears[l * LORA_N_MODULES + pm->first + part];
                module_dims(cfg, (LoraModule)(pm->first + part), &lin->in, &lin->out);
                in = lin->in;
                out += lin->out;
            }
            for (int ab = 0; ab < 2; ab++) {
                LoraParamInfo *p = &a->info[a->n_info++];
                snprintf(p->name, sizeof p->name, "base_model.model.%s.lora_%c.weight", full,
                         ab ? 'B' : 'A');
                p->shape[0] = ab ? out : r;
                p->shape[1] = ab ? r : in;
                p->numel = (size_t)p->shape[0] * (size_t)p->shape[1];
                p->offset = total;
                total += p->numel;
            }
        }
    }
    if (a->n_info == 0) {
        lora_free(a);
        return err_set("lora_target_modules matches no module of this model (it has %s)",
                       cfg->fused_qkv_mlp ? "qkv_proj, o_proj, gate_up_proj, down_proj"
                                          : "q_proj, k_proj, v_proj, o_proj, gate_proj, "
                                            "up_proj, down_proj");
    }
    a->params = xcalloc(total, sizeof(float));
    a->n_params = total;
    for (int i = 0, l = 0; l < cfg->n_layers; l++) {
        for (int k = 0; k < n_modules; k++) {
            const PeftModule *pm = &modules[k];
            if (!a->linears[l * LORA_N_MODULES + pm->first].in) continue;
            float *A = a->params + a->info[i++].offset, *B = a->params + a->info[i++].offset;
            for (int part = 0; part < pm->parts; part++) {
                LoraLinear *lin = &a->linears[l * LORA_N_MODULES + pm->first + part];
                lin->A = A;
                lin->B = B;
                B += (size_t)lin->out * r;
            }
        }
    }
    a->target_modules = xcalloc((size_t)n_targets, sizeof *a->target_modules);
    for (int i = 0; i < n_targets; i++)
        a->target_modules[i] = xstrdup(targets[i]);
    a->n_targets = n_targets;
    return 0;
}

float *lora_rebase_params(LoraAdapter *a, float *params) {
    float *old = a->params;
    for (int i = 0; i < a->n_layers * LORA_N_MODULES; i++) {
        LoraLinear *lin = &a->linears[i];
        if (lin->A) lin->A = params + (lin->A - old);
        if (lin->B) lin->B = params + (lin->B - old);
    }
    a->params = params;
    return old;
}

/* Draws and discards a kaiming_uniform_ of n elements: nn.Linear's own init of a LoRA factor,
 * which PEFT overwrites but which moves the generator by one draw per element. */
static void skip_linear_init(TorchGenerator *g, size_t n) {
    for (size_t i = 0; i < n; i++)
        (void)torch_generator_random(g);
}

int lora_create(LoraAdapter *a, const ModelConfig *cfg, int r, double alpha, bool rslora,
                double dropout, const char *const *targets, int n_targets, uint64_t seed) {
    if (lora_layout(a, cfg, r, alpha, rslora, dropout, targets, n_targets) != 0) return -1;
    /* PEFT's draws after transformers.set_seed(seed) and from_pretrained (which draws nothing:
     * every weight is loaded). For each adapted module in named_modules() order (layer by
     * layer, modules in peft_modules order: lora_layout invariant 1, so info's order; a fused
     * module such as Phi-3's qkv_proj is one module with one A and a stacked B),
     * LoraLayer.update_layer builds nn.Linear(in, r) and nn.Linear(r, out, bias=False), each
     * running its own kaiming_uniform_(a=sqrt(5)), then reset_lora_parameters draws A again with
     * kaiming_uniform_(a=sqrt(5)) and zeroes B (the adapter starts as a no-op). */
    TorchGenerator g;
    torch_generator_seed(&g, (int64_t)seed);
    for (int k = 0; k < a->n_info; k += 2) {
        const LoraParamInfo *pa = &a->info[k], *pb = &a->info[k + 1];
        skip_linear_init(&g, pa->numel); /* A: (r, in) */
        skip_linear_init(&g, pb->numel); /* B: (out, r) */
        torch_kaiming_uniform_f32(&g, a->params + pa->offset, pa->shape[0], pa->shape[1],
                                  sqrt(5.0));
    }
    return 0;
}

static int read_targets(const json_t *v, const char *path, char ***out, int *n) {
    *n = 0;
    if (json_is_string(v)) {
        if (strcmp(json_string_value(v), "all-linear") != 0)
            return err_set(
                "%s: target_modules as a regular expression (\"%s\") is not supported; give "
                "a list of module names",
                path, json_string_value(v));
        *out = xcalloc(1, sizeof **out);
        (*out)[(*n)++] = xstrdup("all-linear");
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) == 0)
        return err_set("%s: key 'target_modules': expected a list of module names", path);
    *out = xcalloc(json_array_size(v), sizeof **out);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_string(e)) return err_set("%s: key 'target_modules': expected names", path);
        (*out)[(*n)++] = xstrdup(json_string_value(e));
    }
    return 0;
}

static int check_unsupported(const json_t *c, const char *path) {
    const char *type = json_string_value(json_object_get(c, "peft_type"));
    if (!type || strcmp(type, "LORA") != 0)
        return err_set("%s: peft_type \"%s\" is not supported (LORA only)", path,
                       type ? type : "(missing)");
    if (json_is_true(json_object_get(c, "use_dora")))
        return err_set("%s: DoRA (use_dora) is not supported", path);
    if (json_is_true(json_object_get(c, "lora_bias")))
        return err_set("%s: lora_bias is not supported", path);
    const char *bias = json_string_value(json_object_get(c, "bias"));
    if (bias && strcmp(bias, "none") != 0)
        return err_set("%s: bias \"%s\" is not supported (none)", path, bias);
    const char *empty_only[] = {"rank_pattern", "alpha_pattern"};
    for (int i = 0; i < 2; i++) {
        const json_t *v = json_object_get(c, empty_only[i]);
        if (v && json_is_object(v) && json_object_size(v) > 0)
            return err_set("%s: %s is not supported", path, empty_only[i]);
    }
    const char *null_only[] = {"layers_to_transform", "layer_replication", "modules_to_save",
                               "target_parameters"};
    for (int i = 0; i < 4; i++) {
        const json_t *v = json_object_get(c, null_only[i]);
        if (v && !json_is_null(v) && !(json_is_array(v) && json_array_size(v) == 0))
            return err_set("%s: %s is not supported", path, null_only[i]);
    }
    return 0;
}

int lora_load(LoraAdapter *a, const ModelConfig *cfg, const char *dir) {
    memset(a, 0, sizeof *a);
    char path[4096], weights[4096];
    if (path_join(path, sizeof path, dir, "adapter_config.json") ||
        path_join(weights, sizeof weights, dir, "adapter_model.safetensors"))
        return -1;
    json_t *c;
    if (json_load_path(path, &c) != 0) return -1;
    int rc = check_unsupported(c, path);
    int64_t r = 0;
    double alpha = 8;
    bool rslora = false;
    char **targets = NULL;
    int n_targets = 0;
    if (rc == 0 && json_get_int64(c, "r", &r) != 1)
        rc = err_set("%s: key 'r': missing or not an integer", path);
    if (rc == 0 && (r <= 0 || r > 65536))
        rc = err_set("%s: key 'r': must be a positive rank, got %lld", path, (long long)r);
    if (rc == 0 && json_get_double(c, "lora_alpha", &alpha) < 0) rc = err_prefix("%s", path);
    if (rc == 0 && json_get_bool(c, "use_rslora", &rslora) < 0) rc = err_prefix("%s", path);
    double dropout = 0;
    if (rc == 0 && json_get_double(c, "lora_dropout", &dropout) < 0) rc = err_prefix("%s", path);
    if (rc == 0 && (dropout < 0 || dropout >= 1))
        rc = err_set("%s: key 'lora_dropout': must be in [0, 1), got %g", path, dropout);
    if (rc == 0)
        rc = read_targets(json_object_get(c, "target_modules"), path, &targets, &n_targets);
    json_decref(c);
    if (rc == 0)
        rc = lora_layout(a, cfg, (int)r, alpha, rslora, dropout, (const char *const *)targets,
                         n_targets);
    for (int i = 0; i < n_targets; i++)
        free(targets[i]);
    free(targets);
    if (rc != 0) return err_prefix("%s", dir);
    SafetensorsFile f;
    if (safetensors_open(&f, weights) != 0) {
        lora_free(a);
        return -1;
    }
    for (int i = 0; rc == 0 && i < a->n_info; i++) {
        const LoraParamInfo *p = &a->info[i];
        const SafetensorsTensor *t = safetensors_find(&f, p->name);
        if (!t)
            rc = err_set(
                "%s: tensor \"%s\" is missing (adapter_config.json's target_modules name it)",
                weights, p->name);
        else if (t->ndim != 2 || t->shape[0] != p->shape[0] || t->shape[1] != p->shape[1])
            rc = err_set(
                "%s: tensor \"%s\" has shape [%lld, %lld], the base model needs [%lld, %lld]",
                weights, p->name, (long long)(t->ndim > 0 ? t->shape[0] : 0),
                (long long)(t->ndim > 1 ? t->shape[1] : 0), (long long)p->shape[0],
                (long long)p->shape[1]);
        else
            rc = safetensors_to_f32(t, a->params + p->offset);
    }
    for (size_t t = 0; rc == 0 && t < f.n_tensors; t++) {
        bool known = false;
        for (int i = 0; i < a->n_info && !known; i++)
            known = strcmp(a->info[i].name, f.tensors[t].name) == 0;
        if (!known)
            rc = err_set("%s: unexpected tensor \"%s\" (not a LoRA A/B of the target modules)",
                         weights, f.tensors[t].name);
    }
    safetensors_close(&f);
    if (rc != 0) lora_free(a);
    return rc;
}

int lora_save(const LoraAdapter *a, const char *dir, const char *base_model) {
    char path[4096];
    json_t *c = json_object(), *targets = json_array();
    char **sorted = xcalloc((size_t)a->n_targets, sizeof *sorted);
    for (int i = 0; i < a->n_targets; i++)
        sorted[i] = a->target_modules[i];
    for (int i = 1; i < a->n_targets; i++) /* insertion sort: a handful of names */
        for (int j = i; j > 0 && strcmp(sorted[j - 1], sorted[j]) > 0; j--) {
            char *t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    bool all_linear = a->n_targets == 1 && strcmp(sorted[0], "all-linear") == 0;
    for (int i = 0; i < a->n_targets && !all_linear; i++)
        json_array_append_new(targets, json_string(sorted[i]));
    free(sorted);
    json_object_set_new(c, "alpha_pattern", json_object());
    json_object_set_new(c, "auto_mapping", json_null());
    json_object_set_new(c, "base_model_name_or_path",
                        base_model ? json_string(base_model) : json_null());
    json_object_set_new(c, "bias", json_string("none"));
    json_object_set_new(c, "fan_in_fan_out", json_false());
    json_object_set_new(c, "inference_mode", json_true());
    json_object_set_new(c, "init_lora_weights", json_true());
    json_object_set_new(c, "layers_pattern", json_null());
    json_object_set_new(c, "layers_to_transform", json_null());
    /* an integral alpha as an integer, as PEFT writes the usual int */
    json_object_set_new(c, "lora_alpha",
                        a->alpha == floor(a->alpha) && fabs(a->alpha) < 1e15
                            ? json_integer((json_int_t)a->alpha)
                            : json_real(a->alpha));
    json_object_set_new(c, "lora_dropout", json_real(a->dropout));
    json_object_set_new(c, "modules_to_save", json_null());
    json_object_set_new(c, "peft_type", json_string("LORA"));
    json_object_set_new(c, "r", json_integer(a->r));
    json_object_set_new(c, "rank_pattern", json_object());
    json_object_set_new(c, "revision", json_null());
    if (all_linear) {
        json_decref(targets);
        json_object_set_new(c, "target_modules", json_string("all-linear"));
    } else {
        json_object_set_new(c, "target_modules", targets);
    }
    json_object_set_new(c, "task_type", json_string("CAUSAL_LM"));
    json_object_set_new(c, "use_dora", json_false());
    json_object_set_new(c, "use_rslora", json_boolean(a->rslora));
    char *text = json_dumps(c, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(15));
    json_decref(c);
    int rc = path_join(path, sizeof path, dir, "adapter_config.json");
    if (rc == 0) rc = write_file_atomic(path, text, strlen(text));
    free(text);
    if (rc != 0) return -1;
    SafetensorsWriteTensor *t = xcalloc((size_t)a->n_info, sizeof *t);
    for (int i = 0; i < a->n_info; i++)
        t[i] = (SafetensorsWriteTensor){a->info[i].name,
                                        ST_F32,
                                        2,
                                        {a->info[i].shape[0], a->info[i].shape[1]},
                                        a->params + a->info[i].offset};
    rc = path_join(path, sizeof path, dir, "adapter_model.safetensors");
    if (rc == 0) rc = safetensors_write(path, t, (size_t)a->n_info);
    free(t);
    return rc;
}

void lora_free(LoraAdapter *a) {
    for (int i = 0; i < a->n_targets; i++)
        free(a->target_modules[i]);
    free(a->target_modules);
    free(a->linears);
    free(a->params);
    free(a->info);
    memset(a, 0, sizeof *a);
}

const LoraLinear *lora_linear(const LoraAdapter *a, int layer, LoraModule m) {
    if (!a || !a->enabled) return NULL;
    const LoraLinear *lin = &a->linears[layer * LORA_N_MODULES + m];
    return lin->A ? lin : NULL;
}

uint64_t lora_dropout_key(const LoraAdapter *a, int layer, LoraModule m) {
    /* PEFT drops out a fused module's input once: its parts share the first part's mask */
    if (a->fused && (m == LORA_K || m == LORA_V)) m = LORA_Q;
    if (a->fused && m == LORA_UP) m = LORA_GATE;
    uint64_t x =
        a->dropout_key ^ ((uint64_t)(layer * LORA_N_MODULES + m) + 1) * 0xD1B54A32D192ED03ull;
    return rng_splitmix64_next(&x);
}

float lora_dropout_p(const LoraAdapter *a) {
    return a->training ? (float)a->dropout : 0.0f;
}
