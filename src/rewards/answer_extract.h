/* Final-answer extraction and comparison for builtin.accuracy: the conventions math datasets
 * settled on (MATH's \boxed{...}, GSM8K's "#### 42", otherwise the last number written).
 *
 * Extraction finds a span of the text; comparison normalises both sides (trim, drop ',' and
 * '$', drop trailing '.') and compares numbers by value when both sides are plain numbers
 * ("3.0" == "3", "1,000" == "1000"), the normalised strings otherwise. */
#ifndef RLHF_REWARDS_ANSWER_EXTRACT_H
#define RLHF_REWARDS_ANSWER_EXTRACT_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    ANSWER_AUTO,        /* boxed, else hash, else last_number */
    ANSWER_BOXED,       /* the content of the last complete \boxed{...} */
    ANSWER_HASH,        /* the rest of the line after the last "####" */
    ANSWER_LAST_NUMBER, /* the last number: sign, thousands commas, decimals */
    ANSWER_WHOLE,       /* the whole text ("none": no extraction) */
} AnswerExtract;

/* "auto", "boxed", "hash", "last_number", "none" -> mode; -1 (no error set) when unknown. */
int answer_extract_parse(const char *name, AnswerExtract *out);

/* A span of a text. */
typedef struct {
    const char *p;
    size_t len;
} AnswerSpan;

/* Finds the answer in text[0..len) as `mode` says. Returns false when the text has none (no
 * \boxed{...}, no "####", no number), which scores as a wrong answer. */
bool answer_extract(const char *text, size_t len, AnswerExtract mode, AnswerSpan *out);

/* Where a dataset's reference answer is found in its column value: a \boxed{...} (MATH
 * solutions), else after "####" (GSM8K answers), else the whole value (a bare answer). */
AnswerSpan answer_reference(const char *text, size_t len);

/* Whether two extracted answers are the same after normalisation (see the top comment). */
bool answer_equal(AnswerSpan a, AnswerSpan b);

#endif
