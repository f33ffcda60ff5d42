/* A reward function in any language: an external command speaking JSON lines
 * (axolotl-config.md §12.1 (c)). It runs in its own process, so a crash, a hang or a
 * signal.alarm-based checker (math_verify) cannot take the trainer down with it.
 *
 * Protocol. `/bin/sh -c command` is started once, when the function is opened, and lives until
 * it is closed. For each generation batch it reads ONE line on its stdin: a JSON object with
 *   "prompts"         list[n]: strings, or lists of {"role", "content"} messages
 *   "completions"     list[n]: strings, or [{"role": "assistant", "content": text}]
 *   "completion_ids"  list[n] of lists of token ids
 *   "<column>"        list[n] for every other dataset column (e.g. "answer")
 *   "trainer_state"   {"global_step", "max_steps", "epoch"}
 * (the keyword arguments a Python reward function gets) and writes ONE line on its stdout: a
 * JSON array of n numbers or nulls (null: no score for that completion, NaN). Its stdout carries
 * nothing else (diagnostics go to stderr, which is the trainer's). At end of input it should
 * exit.
 *
 * A minimal command in Python:
 *   import json, sys
 *   for line in sys.stdin:
 *       batch = json.loads(line)
 *       print(json.dumps([float(len(c)) for c in batch["completions"]]), flush=True)
 *
 * Failures. Each batch (writing the request and reading the answer) must finish within the
 * timeout. A timeout, the command exiting or being killed by a signal, end of its output before
 * a full line, a second line, invalid JSON, something other than an array, the wrong number of
 * scores or a score that is neither a number nor null makes score() fail with an error naming
 * the function and what happened; the command is then killed (SIGKILL to its process group) and
 * reaped. A failed function stays failed: later score() calls fail at once, naming the first
 * failure, and the command is not restarted (a command that failed once, for instance by
 * running out of memory on a batch, would most likely fail again, and a trainer silently
 * training on partial rewards is worse than one that stops). */
#ifndef RLHF_REWARDS_COMMAND_REWARD_H
#define RLHF_REWARDS_COMMAND_REWARD_H

#include "rewards/reward_func.h"

/* Starts `command` under the metrics name `name`. timeout_s limits each batch; <= 0 or
 * infinite: no limit. Returns 0, or -1 with an error (empty name or command, NaN timeout, the
 * shell could not be started) and f zeroed. reward_func_close() closes the command's stdin,
 * gives it a second to exit, then kills it; it never leaves a zombie. */
int command_reward_open(RewardFunc *f, const char *name, const char *command, double timeout_s);

#endif
