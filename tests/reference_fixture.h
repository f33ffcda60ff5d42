/* Reading tests/fixtures/models/<name>/reference.json, written by
 * tools/reference/make_model_fixtures.py with transformers. */
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

#endif
