/* The filter table's entries (filters_text.c, filters_seq.c) and what they share; only the
 * filter files include this. Every jf_ function has the JFilterFn contract (filters.c). */
#ifndef RLHF_JINJA_FILTERS_H
#define RLHF_JINJA_FILTERS_H

#include "jinja/jinja_internal.h"

/* Applies a filter to v with its arguments. `what` names it in errors ("filter 'trim'"). Returns
 * the result (in ctx->arena), or NULL with "line N: ..." set. */
typedef JValue *JFilterFn(JCtx *c, JValue *v, const JArgs *a, const char *what, int line);

JFilterFn jf_abs;
JFilterFn jf_attr;
JFilterFn jf_batch;
JFilterFn jf_capitalize;
JFilterFn jf_center;
JFilterFn jf_default;
JFilterFn jf_dictsort;
JFilterFn jf_escape;
JFilterFn jf_first;
JFilterFn jf_float;
JFilterFn jf_format;
JFilterFn jf_indent;
JFilterFn jf_int;
JFilterFn jf_items;
JFilterFn jf_join;
JFilterFn jf_last;
JFilterFn jf_length;
JFilterFn jf_list;
JFilterFn jf_lower;
JFilterFn jf_map;
JFilterFn jf_max;
JFilterFn jf_min;
JFilterFn jf_reject;
JFilterFn jf_rejectattr;
JFilterFn jf_replace;
JFilterFn jf_reverse;
JFilterFn jf_round;
JFilterFn jf_safe;
JFilterFn jf_select;
JFilterFn jf_selectattr;
JFilterFn jf_sort;
JFilterFn jf_string;
JFilterFn jf_sum;
JFilterFn jf_title;
JFilterFn jf_tojson;
JFilterFn jf_trim;
JFilterFn jf_truncate;
JFilterFn jf_unique;
JFilterFn jf_upper;
JFilterFn jf_wordcount;

#endif
