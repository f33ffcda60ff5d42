/* Reward functions written in C, for the rewards GRPO users reach for every day without writing
 * Python (axolotl-config.md §12.1 (a)). Selected by name in `trl.reward_funcs`, configured by an
 * options object:
 *
 * builtin.accuracy   1.0 when the completion's final answer equals the dataset's reference
 *                    answer, else 0.0; NaN (no score) for rows whose reference is null.
 *   column   dataset column holding the reference (default "answer"). The column must be in
 *            the batch; a string value may itself be a solution: its \boxed{...}, else the rest
 *            of the line after "####" (GSM8K), else the whole value is the answer; a number is
 *            the answer.
 *   extract  how the completion's answer is found (default "auto"):
 *            "boxed"        the content of the last \boxed{...} (nested braces balanced)
 *            "hash"         the rest of the line after the last "####"
 *            "last_number"  the last number: -1,234.5 style (sign, thousands commas, decimals)
 *            "auto"         boxed if there is one, else hash, else last_number
 *            "none"         the whole completion
 *            No answer found (no box, no number, ...) scores 0.0.
 *   Both answers are compared after trimming and dropping ',' '$' and a trailing '.'; when both
 *   are plain numbers they compare by value ("3.0" == "3", "1,000" == "1000"), otherwise as
 *   exact strings (case matters).
 *
 * builtin.format     1.0 when the completion matches a regular expression (PCRE2), else 0.0.
 *   pattern  default ^<think>.*?</think>\s*<answer>.*?</answer>$ (the usual reasoning format)
 *   match    "full" (default): the whole completion must match, like Python's re.fullmatch (so
 *            a trailing newline after </answer> does not match the default pattern);
 *            "search": a match anywhere, like re.search.
 *   dotall   '.' also matches newlines (default true, as the reasoning format needs).
 *
 * builtin.length     prefers completions of about `target` tokens:
 *                    reward = max(0, 1 - |tokens - target| / target), so 1.0 at the target,
 *                    0.5 at half or one and a half times it, 0.0 at none or twice it and beyond.
 *   target   required, a positive integer (tokens of the completion as generated).
 *
 * Every built-in also takes `name`, the name metrics use (rewards/<name>/mean); by default
 * "accuracy", "format" or "length". The text judged is the completion string, or for a
 * conversational completion the content of its last assistant message. */
#ifndef RLHF_REWARDS_BUILTIN_REWARDS_H
#define RLHF_REWARDS_BUILTIN_REWARDS_H

#include "rewards/reward_func.h"

#include <jansson.h>

/* Opens the built-in `name` ("builtin.accuracy", ...) with `options` (an object, or NULL for
 * the defaults). Returns 0, or -1 with an error (unknown name: the known ones are listed;
 * unknown option, wrongly typed or invalid value, regex that does not compile: pattern, PCRE2's
 * message and offset) and f zeroed. Close with reward_func_close(). */
int builtin_reward_open(RewardFunc *f, const char *name, const json_t *options);

#endif
