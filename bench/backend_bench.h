/* What the device-backend benchmark's modes share (bench_backend_step.c: the DPO step and
 * decoding; bench_backend_grpo.c: the GRPO step): a model of a Hugging Face config's shape with
 * random weights, its gradients and AdamW's moments, all in the backend's memory, and the FLOP
 * count every mode reports. */
#ifndef RLHF_BENCH_BACKEND_BENCH_H
#define RLHF_BENCH_BACKEND_BENCH_H

#include "kernels/backend.h"
#include "model/model.h"
#include "train/optimizer.h"

#include <stdbool.h>
#include <stdint.h>

/* A model in a backend's memory, ready to train (full fine-tune). */
typedef struct {
    Backend *be;
    Model m;            /* m.params in be's memory */
    float *host_params; /* the host copy model_init_empty made, swapped back before freeing */
    float *grads;       /* be's memory, m.n_params */
    ParamSpan *spans;   /* one a parameter tensor */
    AdamW opt;          /* moments in be's memory (`moments`) */
    float *moments;
} BenchModel;

/* Opens the backend (bf16 autocast or not) and builds a model of config_path's shape with
 * uniform random weights in [-0.02, 0.02) (speed does not depend on the values, and METHOD.md
 * asks for no zeros), its gradients and zeroed AdamW moments in the backend's memory. Returns 0,
 * or 1 after printing the error (2 for an unreadable config). */
int bench_model_open(BenchModel *bm, const char *config_path, bool autocast);

/* Frees what bench_model_open made, the backend too. */
void bench_model_close(BenchModel *bm);

/* Seconds of CLOCK_MONOTONIC. */
double bench_now_seconds(void);

/* Prints "bench_backend_step: WHAT: <the pending error>" to stderr; returns 1. */
int bench_fail(const char *what);

/* The benchmark's own random stream (fixed seed: every run draws the same numbers). */
uint32_t bench_next_u32(void);

/* FLOPs of one forward token at context length t: 2 a matrix parameter (every matrix but the
 * embedding gather; the lm_head once, tied or not) plus causal attention (on average t/2 keys;
 * QK^T and PV, 2 FLOPs a multiply-add, per layer and head). A training step counts 4 of these a
 * token: the reference forward 1, the policy's forward 1, its backward 2. */
double bench_matmul_params(const Model *m);
double bench_flops_per_token(const Model *m, int t);

/* The GRPO mode: argv as main's, argv[1] "grpo" (bench_backend_grpo.c). */
int bench_grpo_main(int argc, char **argv);

#endif
