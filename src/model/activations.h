/* Activations of the forward pass, shared by forward.c (which fills them) and backward.c
 * (which reads them back).
 *
 * Inference uses one LayerActs for every layer and updates the residual stream in place
 * (x_in == x_mid == x_out). Training keeps a ForwardTape: one LayerActs per layer with its own
 * buffers, where layer l's output residual is layer l+1's x_in, so backward finds every input it
 * needs without recomputing a layer. The normed block inputs are not kept (recomputed from
 * x_in / x_mid: one cheap pass per block). */
#ifndef RLHF_MODEL_ACTIVATIONS_H
#define RLHF_MODEL_ACTIVATIONS_H

#include "model/forward.h"
#include "model/token_layout.h"

#include <stdbool.h>
#include <stddef.h>

/* One layer's activations, in backend memory (model_backend). */
typedef struct {
    float *x_in;          /* (N, H) residual stream entering the layer */
    float *x_mid;         /* (N, H) residual after the attention block */
    float *xn;            /* (N, H) normed input of the current block (scratch) */
    float *q_pre, *k_pre; /* (N, nh*hd), (N, nkv*hd) q/k before Qwen3's q/k norm; NULL otherwise */
    float *q;             /* (N, nh*hd) after norm and RoPE */
    float *k, *v;         /* (N, nkv*hd) k after norm and RoPE */
    float *att;           /* (N, nh*hd) attention output before o_proj */
    float *gate;          /* (N, I) gate_proj output (before SiLU) */
    float *up;            /* (N, I) up_proj output */
    float *act;           /* (N, I) silu(gate) * up (on a training tape: shared, regenerated) */
    float *proj;          /* (N, H) block output before the residual add (scratch) */
    /* Gemma 2: o_proj's and down_proj's outputs, the inputs of the norms that make proj (kept for
     * the backward; on inference rows both are proj, normed in place). NULL otherwise. */
    float *attn_out, *mlp_out;
    float *block; /* the allocation behind the buffers this LayerActs owns */
} LayerActs;

/* A TokenLayout's arrays and the RoPE tables as the backend sees them (backend_mirror: the host
 * arrays themselves on the CPU, copies in device memory elsewhere). */
typedef struct {
    const int32_t *tokens, *positions, *seq_index; /* (n) each */
    const AttnSegment *segs;
    int n_segs;
    const float *cos_t, *sin_t;         /* (n_positions, hd/2) */
    const float *cos_local, *sin_local; /* Gemma 3's sliding layers' (rope_tables.h); or NULL */
    void *owned[6];                     /* the copies this mirror made, to be->free */
} LayoutMirror;

/* Everything one training forward keeps for the backward. With `recompute`
 * (gradient_checkpointing) each layer keeps only its x_in, and backward regenerates the rest of a
 * layer's activations, one layer at a time, into `scratch`: one layer's worth of memory instead
 * of L, for one extra forward pass. The regenerated values are bitwise those of the first pass. */
typedef struct {
    size_t capacity; /* tokens the buffers hold; a later call with at most as many reuses them */
    bool recompute;
    LayerActs scratch;  /* recompute: one layer's full buffers, reused by every layer */
    float *discard;     /* recompute: (N, H) for the layer output a recomputation rewrites */
    TokenBatch batch;   /* the caller's batch (pointers borrowed; must outlive the tape) */
    TokenLayout layout; /* where its cells are computed */
    size_t n;           /* rows computed: layout.n */
    LayerActs *layers;  /* [n_layers] */
    int n_layers;
    float *x_final;       /* (N, H) residual leaving the last layer */
    float *hidden;        /* (N, H) after the final norm */
    float *cos_t, *sin_t; /* RoPE tables (n_positions, hd/2), host */
    LayoutMirror dev;     /* layout and tables as the backend reads them */
    const Backend *be;    /* where the buffers above (but layout, cos_t, sin_t) live */
    /* The lm_head's hand-over (backend logprob_lse): NULL, or what the tape's last
     * model_tape_logprobs* call kept (TapeLse's invariants). A separate allocation, so that
     * those calls, which take the tape const, can refresh it. */
    struct TapeLse *lse;
} ForwardTape;

/* Each scored row's log-sum-exp from the tape's last log-prob pass, for the backward.
 * Invariants:
 *  1. valid only between a model_tape_logprobs* call and the next model_forward_tape on the
 *     tape (which clears `valid`): the hidden rows and the lm_head are those of that pass.
 *  2. where[0 .. n_sel) are the cells that pass scored, in its order; the backward takes lse
 *     only when its own target_mask selects exactly these cells, else it recomputes.
 *  3. lse (n_sel floats) lives in the tape's backend memory; where on the host. */
typedef struct TapeLse {
    bool valid;
    size_t n_sel, capacity; /* rows held / allocated */
    size_t *where;
    float *lse;
} TapeLse;

/* Runs the forward keeping what backward needs (see ForwardTape). `tape` is either zeroed
 * ({0}) or a tape of an earlier call, whose buffers are reused when they are large enough (so a
 * training loop allocates once); forward_tape_free releases it. Returns 0, or -1 with an error
 * (bad token ids, out of memory); the tape may then still hold buffers to free. */
int model_forward_tape(const Model *m, const TokenBatch *b, bool recompute, ForwardTape *tape);

/* The activations of layer l for its backward: those kept on the tape, or, with recompute, the
 * ones regenerated now into the tape's scratch buffers (valid until the next call). A kept tape
 * shares act between the layers and regenerates it here, unless with_act is false: then act is
 * stale and the caller writes it (SwiGLU's backward can, swiglu_backward_act). */
LayerActs forward_tape_layer(const Model *m, const ForwardTape *tape, int l, bool with_act);
void forward_tape_free(ForwardTape *tape);

/* logp (B*T) and, when stats is given, the logits' statistics, at the cells of b that
 * target_mask selects (token_layout_targets), from hidden (lay->n, H): the final hidden states of
 * the layout's rows. Zero elsewhere. Shared by the inference forward and the training tape.
 * Returns 0, or -1 with an error when memory runs out. */
int model_layout_logprobs(const Model *m, const TokenLayout *lay, const TokenBatch *b,
                          const uint8_t *target_mask, const float *hidden, float *logp,
                          LogitStats *stats);

/* model_layout_logprobs that also fills *keep (TapeLse; its buffers grown as needed, in the
 * backend's memory) where the backend offers logprob_lse and no logit soft cap applies; else
 * marks it not valid. */
int model_layout_logprobs_keep(const Model *m, const TokenLayout *lay, const TokenBatch *b,
                               const uint8_t *target_mask, const float *hidden, float *logp,
                               LogitStats *stats, TapeLse *keep);

#endif
