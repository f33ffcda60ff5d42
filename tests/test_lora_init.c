/* lora_create against PEFT: tests/fixtures/lora_init/<case>/ are adapters PEFT's get_peft_model
 * made right after transformers.set_seed(seed) and from_pretrained of a fixture model
 * (tools/reference/make_lora_init_fixtures.py; cases.json lists seed, r, alpha, targets). A
 * fresh rlhf.c adapter for the same seed must hold the same A, bit for bit, on the same modules,
 * and B = 0. */
#include "common/error.h"
#include "harness.h"
#include "model/config.h"
#include "model/lora.h"

#include <jansson.h>
#include <string.h>

/* Compares fresh (lora_create) with peft (lora_load); returns the number of differing values. */
static int compare(const LoraAdapter *fresh, const LoraAdapter *peft, const char *name) {
    int bad = 0, n_modules = 0;
    for (int l = 0; l < fresh->n_layers; l++)
        for (int m = 0; m < LORA_N_MODULES; m++) {
            const LoraLinear *f = &fresh->linears[l * LORA_N_MODULES + m];
            const LoraLinear *p = &peft->linears[l * LORA_N_MODULES + m];
            if (!f->A != !p->A) {
                fprintf(stderr, "%s: layer %d %s adapted by one side only\n", name, l,
                        lora_module_name((LoraModule)m));
                bad++;
                continue;
            }
            if (!f->A) continue;
            n_modules++;
            size_t na = (size_t)fresh->r * (size_t)f->in, nb = (size_t)f->out * (size_t)fresh->r;
            if (memcmp(f->A, p->A, na * sizeof *f->A) != 0) {
                for (size_t i = 0; i < na; i++)
                    if (memcmp(&f->A[i], &p->A[i], sizeof *f->A) != 0) {
                        fprintf(stderr, "%s: layer %d %s A[%zu] = %.9g, PEFT %.9g\n", name, l,
                                lora_module_name((LoraModule)m), i, f->A[i], p->A[i]);
                        break;
                    }
                bad++;
            }
            for (size_t i = 0; i < nb; i++)
                if (f->B[i] != 0.0f || p->B[i] != 0.0f) {
                    fprintf(stderr, "%s: layer %d %s B not zero\n", name, l,
                            lora_module_name((LoraModule)m));
                    bad++;
                    break;
                }
        }
    CHECK(n_modules > 0, "%s: some module is adapted", name);
    return bad;
}

int main(void) {
    json_t *root = harness_load_fixture_json("tests/fixtures/lora_init/cases.json");
    if (!root) return 1;
    size_t i;
    json_t *c;
    int n_cases = 0;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        char dir[512];
        snprintf(dir, sizeof dir, "tests/fixtures/models/%s",
                 json_string_value(json_object_get(c, "model")));
        ModelConfig mc;
        if (model_config_load(&mc, harness_source_path(dir)) != 0) {
            CHECK(0, "%s: %s", name, err_msg());
            continue;
        }
        json_t *t = json_object_get(c, "targets");
        const char *targets[16];
        int n_targets = 0;
        if (json_is_string(t)) {
            targets[n_targets++] = json_string_value(t);
        } else {
            size_t k;
            json_t *e;
            json_array_foreach(t, k, e) targets[n_targets++] = json_string_value(e);
        }
        LoraAdapter fresh, peft;
        int r = (int)json_integer_value(json_object_get(c, "r"));
        double alpha = json_number_value(json_object_get(c, "alpha"));
        uint64_t seed = (uint64_t)json_integer_value(json_object_get(c, "seed"));
        CHECK(lora_create(&fresh, &mc, r, alpha, false, 0, targets, n_targets, seed) == 0,
              "%s: lora_create: %s", name, err_msg());
        snprintf(dir, sizeof dir, "tests/fixtures/lora_init/%s", name);
        CHECK(lora_load(&peft, &mc, harness_source_path(dir)) == 0, "%s: lora_load: %s", name,
              err_msg());
        CHECK(peft.r == fresh.r && peft.n_layers == fresh.n_layers, "%s: same shape", name);
        CHECK(compare(&fresh, &peft, name) == 0, "%s: fresh adapter = PEFT's for seed %llu", name,
              (unsigned long long)seed);
        lora_free(&fresh);
        lora_free(&peft);
        model_config_free(&mc);
        n_cases++;
    }
    CHECK(n_cases >= 4, "every case ran (%d)", n_cases);
    json_decref(root);
    return harness_finish("test_lora_init");
}
