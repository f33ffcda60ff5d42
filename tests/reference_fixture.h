/* Reading tests/fixtures/models/<name>/reference.json, written by
 * tools/reference/make_model_fixtures.py with transformers (and reference_bf16.json). */
#ifndef RLHF_TESTS_REFERENCE_FIXTURE_H
#define RLHF_TESTS_REFERENCE_FIXTURE_H

#include <jansson.h>
#include <stdint.h>

typedef struct {
    json_t *root;
    int batch, t_len;
    int32_t *tokens;    /* (B, T) */
    uint8_t *mask;      /* (B, T) */
    double *token_logp; /* (B, T) */
} ReferenceFixture;

/* Loads DIR/reference.json; exits the test with a message when it cannot. */
void reference_fixture_load(ReferenceFixture *f, const char *dir);
void reference_fixture_free(ReferenceFixture *f);

/* Replaces the expected token_logp and logits_check with those of DIR/reference_bf16.json
 * (tools/reference/make_bf16_weight_fixtures.py: every weight rounded to bf16, fp32 arithmetic).
 * Returns what the rounding alone changes: its max_rel_vs_fp32. */
double reference_fixture_use_bf16(ReferenceFixture *f, const char *dir);

#endif
