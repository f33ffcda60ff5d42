/* rlhf.h: the public C API of rlhf.c, for programs that embed the library (librlhf.so) and for
 * language bindings (the Python package in python/ calls nothing else).
 *
 * One object: a trainer, made from a configuration with the keys of `rlhf train`'s YAML file
 * (base_model, rl, datasets, trl: {...}, adapter: lora, ...; see README.md). It loads the model
 * when it is made, trains it when asked (as many times as asked), and lets the caller read the
 * weights, the log history and save the model.
 *
 * Conventions.
 *  - Every function that can fail returns an int status: RLHF_OK (0), RLHF_ERROR, or
 *    RLHF_INTERRUPTED (rlhf_trainer_train only). After a failure rlhf_last_error() gives the
 *    message `rlhf train` would print after "rlhf: error: " (naming the file, line or key).
 *  - Strings are UTF-8 and NUL-terminated. Strings the library returns belong to it: they stay
 *    valid until the next call on the same trainer (or, for rlhf_last_error, the next failing
 *    call on the same thread). Nothing the caller passes is kept after the call returns unless
 *    said otherwise.
 *  - Threads: a trainer is used by one thread at a time. Only one rlhf_trainer_train runs at a
 *    time in a process (signals and the stop flag are process-wide); a second one fails.
 *  - The library never exits the process, and changes signal handling only during
 *    rlhf_trainer_train (see there).
 */
#ifndef RLHF_H
#define RLHF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define RLHF_API __attribute__((visibility("default")))
#else
#define RLHF_API
#endif

/* Bumped whenever a declaration here changes incompatibly. */
#define RLHF_API_VERSION 1

enum {
    RLHF_OK = 0,
    RLHF_ERROR = 1,       /* see rlhf_last_error() */
    RLHF_INTERRUPTED = 2, /* training stopped on a signal or rlhf_request_stop, checkpoint saved */
};

typedef struct rlhf_trainer rlhf_trainer;

/* RLHF_API_VERSION of the library actually loaded (a binding checks it against its own). */
RLHF_API int rlhf_api_version(void);

/* "MAJOR.MINOR" of the libpython the library was built against. A Python program loading the
 * library must run that same Python version (its interpreter is shared with the library). ""
 * when the library was built without Python (-DRLHF_PYTHON=OFF): it then runs no Python reward
 * function, transform or callable. */
RLHF_API const char *rlhf_python_version(void);

/* The message of the last call that failed on this thread ("" if none has). */
RLHF_API const char *rlhf_last_error(void);

/* Makes a trainer from `config`: YAML text, or JSON (YAML's flow syntax reads it the same way),
 * holding what an `rlhf train` config file holds. `name` stands for the file in messages
 * ("name:3: key 'learning_rate': ..."); NULL means "<config>". Relative paths are taken from the
 * working directory; base_model, tokenizer_config and lora_model_dir may be Hugging Face Hub ids,
 * found in the HF cache or downloaded as `rlhf train` does (io/hub_resolve.h). Loads the model
 * (and makes or loads the adapter) and the tokenizer; the
 * datasets are read when training starts. On success *out is the new trainer (free it with
 * rlhf_trainer_free); on failure *out is NULL. */
RLHF_API int rlhf_trainer_create(const char *config, const char *name, rlhf_trainer **out);

/* Frees the trainer and everything it holds. NULL is allowed. */
RLHF_API void rlhf_trainer_free(rlhf_trainer *t);

/* The configuration's warnings (keys rlhf.c does not know or does not act on), in order: their
 * count, and the i-th (NULL when out of range). */
RLHF_API size_t rlhf_trainer_warning_count(const rlhf_trainer *t);
RLHF_API const char *rlhf_trainer_warning(const rlhf_trainer *t, size_t i);

/* ---- reward functions (rl: grpo / gdpo) ----
 * A configuration names a function registered here as {callback: NAME} in trl.reward_funcs,
 * e.g. {"rl": "grpo", "trl": {"reward_funcs": [{"callback": "my_reward"}]}}. Registering a name
 * again replaces the earlier function. A name nothing is registered under fails when training
 * starts. */

/* A reward function in C. Called once per generation batch, from the thread that called
 * rlhf_trainer_train, with the batch as one JSON object:
 *   {"prompts": [...n], "completions": [...n], "completion_ids": [[...], ...n],
 *    "<column>": [...n] for every other dataset column, "trainer_state": {"global_step",
 *    "max_steps", "epoch"}}
 * (prompts and completions are strings, or lists of {"role", "content"} messages for chat
 * datasets). It writes one score per completion to scores[0..n) (they arrive as NaN; NaN means
 * "no score", as Python's None does in TRL) and returns 0, or returns non-zero after writing a
 * message to error (error_size bytes): training then stops with
 * "reward function NAME failed: <message>". */
typedef int (*rlhf_reward_fn)(void *user_data, const char *batch_json, size_t n, double *scores,
                              char *error, size_t error_size);

/* Registers fn (called with user_data, which the library does not own) under `name`. */
RLHF_API int rlhf_trainer_set_reward(rlhf_trainer *t, const char *name, rlhf_reward_fn fn,
                                     void *user_data);

/* For a Python program that loaded the library into its own interpreter: registers a Python
 * callable (`callable` is a PyObject *; the trainer keeps a reference until it is freed) under
 * `name`. It is called as TRL 1.9's GRPOTrainer calls reward functions: keyword arguments
 * prompts, completions, completion_ids, one per dataset column, trainer_state, log_extra,
 * log_metric; async functions are awaited; it returns one number or None per completion.
 * If it raises, training stops with "reward function NAME raised <Type>: <message> (at
 * file:line in function)", and the exception object is left in
 * sys.modules["_rlhf_support"].last_exception for the caller to re-raise. A library built
 * without Python refuses the callable, saying so. */
RLHF_API int rlhf_trainer_set_python_reward(rlhf_trainer *t, const char *name, void *callable);

/* For a Python program that loaded the library into its own interpreter: the rollout function
 * (`callable` is a PyObject *; the trainer keeps a reference until it is freed or another is
 * set) that a config's `trl.rollout_func: {callback: NAME}` stands for, NAME being its name in
 * messages. It is called as `trl.rollout_func: module.fn` is (either contract: TRL 1.9's
 * fn(prompts, trainer) -> dict, or Axolotl's fn(model, processing_class, prompts,
 * generation_config=None) -> strings; see README's GRPO section). A library built without
 * Python refuses the callable, saying so. */
RLHF_API int rlhf_trainer_set_python_rollout(rlhf_trainer *t, void *callable);

/* ---- training ---- */

/* Flags for rlhf_trainer_train. */
enum {
    /* Leave SIGINT and SIGTERM alone (the caller handles them and calls rlhf_request_stop). */
    RLHF_TRAIN_NO_SIGNAL_HANDLERS = 1u << 0,
};

/* Trains as the configuration says, from the model as it is now. resume_from_checkpoint: NULL
 * (the config's resume_from_checkpoint key decides), "" (start afresh whatever the config
 * says), "true" (the latest checkpoint in output_dir) or a checkpoint directory.
 *
 * Unless RLHF_TRAIN_NO_SIGNAL_HANDLERS is given, SIGINT and SIGTERM are caught for the duration
 * of the call (the actions they had are put back before it returns): the first one lets the
 * current step finish, saves checkpoint-<step> in output_dir and returns RLHF_INTERRUPTED; a
 * second one goes to the action the host program had (for a Python host, its KeyboardInterrupt
 * handler). The final model is NOT written to output_dir: call rlhf_trainer_save_model.
 * Returns RLHF_OK, RLHF_INTERRUPTED or RLHF_ERROR; in every case rlhf_trainer_state describes
 * what was done. */
RLHF_API int rlhf_trainer_train(rlhf_trainer *t, const char *resume_from_checkpoint,
                                unsigned flags);

/* Asks a running rlhf_trainer_train to stop as a signal would (finish the step, save a
 * checkpoint, return RLHF_INTERRUPTED). Async-signal-safe; may be called from any thread, or
 * from a reward function. Has no effect when no training runs. */
RLHF_API void rlhf_request_stop(void);

/* The trainer's state as JSON (valid until the next call on t):
 *   {"global_step": N, "max_steps": N, "epoch": x, "log_history": [{...}, ...],
 *    "train_output": {"global_step": N, "training_loss": x, "metrics": {"train_runtime": s,
 *                     "train_steps_per_second": x, "train_loss": x, "epoch": x}} or null}
 * log_history holds the logged entries (HF's trainer_state.json keys; a resumed run's earlier
 * entries first) and, after a completed run, the summary entry HF's Trainer appends;
 * train_output is the last completed run's (HF's TrainOutput: training_loss is the mean loss
 * over the run's steps). Returns NULL only when out of memory. */
RLHF_API const char *rlhf_trainer_state(rlhf_trainer *t);

/* Writes the model to dir as a Hugging Face model directory (or, with adapter: lora, the PEFT
 * adapter beside the base's config and tokenizer files), created if needed, with its model card
 * README.md as TRL writes it. */
RLHF_API int rlhf_trainer_save_model(rlhf_trainer *t, const char *dir);

/* Uploads dir (a directory rlhf_trainer_save_model wrote) to the Hub model repository repo_id
 * through huggingface_hub, as `rlhf train` does with push_to_hub: the repository is created when
 * missing (private: 1, 0, or -1 for the account's default), then branch `revision` (NULL: main),
 * and dir is committed with commit_message, leaving out checkpoint-* and _*. token NULL: the
 * client's own (HF_TOKEN, `hf auth login`). Blocks; *url (may be NULL) receives the commit's URL,
 * valid until the next call on t. Returns RLHF_OK, or RLHF_ERROR with the reason (no
 * huggingface_hub, no token, no permission, the Hub unreachable). */
RLHF_API int rlhf_trainer_push_to_hub(rlhf_trainer *t, const char *dir, const char *repo_id,
                                      int private_repo, const char *revision,
                                      const char *commit_message, const char *token,
                                      const char **url);

/* ---- parameters ---- */

typedef struct {
    const char *name; /* transformers' name (model.layers.0.self_attn.q_proj.weight); an adapter
                         tensor has PEFT's saved name (...q_proj.lora_A.weight) */
    int ndim;         /* 1 or 2 */
    int64_t shape[2];
    size_t numel;
    int trainable; /* 1: training changes it (every weight, or with an adapter only the adapter) */
} rlhf_param_info;

/* How many parameter tensors the trainer holds: the model's in state-dict order (no lm_head
 * when the embeddings are tied), then the adapter's. */
RLHF_API size_t rlhf_trainer_param_count(const rlhf_trainer *t);

/* Describes tensor i (0 <= i < rlhf_trainer_param_count); the name stays valid as long as t. */
RLHF_API int rlhf_trainer_param_info(const rlhf_trainer *t, size_t i, rlhf_param_info *info);

/* Copies tensor i's values (fp32, row-major) into out, which holds n floats; n must be its
 * numel. */
RLHF_API int rlhf_trainer_param_read(const rlhf_trainer *t, size_t i, float *out, size_t n);

/* ---- the replay buffer (TRL's experimental ReplayBuffer) ----
 * The bounded buffer GRPO's replay training keeps (src/grpo/replay_buffer.h), for items the
 * caller holds: the library keeps each item's score and an id, the caller keeps the item under
 * its id. It holds the max_size items of greatest score offered so far: a new item replaces the
 * held minimum only when its score is strictly greater, so among equal scores the earliest
 * offered is kept. Draws are proportional to score. */

typedef struct rlhf_replay_buffer rlhf_replay_buffer;

/* A buffer of at most max_size items (max_size <= 0: a buffer that keeps nothing). */
RLHF_API int rlhf_replay_buffer_create(int max_size, rlhf_replay_buffer **out);

/* Frees the buffer. NULL is allowed. */
RLHF_API void rlhf_replay_buffer_free(rlhf_replay_buffer *rb);

/* Offers one item of `score` (finite, >= 0: a draw's weight; anything else fails, naming the
 * score, and the buffer is unchanged). *id receives the item's id (0, 1, 2, ... in the order of
 * offers, whether kept or not); *kept whether the buffer now holds it. An item the buffer held
 * may have been dropped to make room: compare the ids rlhf_replay_buffer_entry lists. */
RLHF_API int rlhf_replay_buffer_add(rlhf_replay_buffer *rb, double score, uint64_t *id, int *kept);

/* How many items the buffer holds. */
RLHF_API size_t rlhf_replay_buffer_size(const rlhf_replay_buffer *rb);

/* The i-th held item (0 <= i < size) in the layout of a binary min-heap (item 0 is the one
 * dropped next: the lowest score, the latest offered among equals; each item is below its
 * children 2i+1 and 2i+2), as Python's heapq lays out TRL's buffer. */
RLHF_API int rlhf_replay_buffer_entry(const rlhf_replay_buffer *rb, size_t i, double *score,
                                      uint64_t *id);

/* Draws n held items' ids into ids[0..n), each with probability proportional to its score (all
 * alike when every score is 0): without replacement when at least n items have a positive
 * score, else with replacement. The draws depend only on the held items, seed and n. Fails when
 * the buffer is empty (and n > 0). */
RLHF_API int rlhf_replay_buffer_sample(const rlhf_replay_buffer *rb, size_t n, uint64_t seed,
                                       uint64_t *ids);

#ifdef __cplusplus
}
#endif

#endif
