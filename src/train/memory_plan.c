#include "train/memory_plan.h"

#include "common/error.h"
#include "common/test_hooks.h"
#include "kernels/cpu/adamw8bit.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/nf4.h"
#include "model/lora.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GB 1e9

/* The lm_head + log-softmax works on chunks of at most ~16 MB of logits (forward.c), and its
 * backward holds a chunk of logits and one of their gradients. */
#define LOGIT_CHUNK_BYTES (16.0 * 1024 * 1024)

/* The vocabulary rows of one lm_head tile under autocast (fused_logprob_autocast.c's
 * VOCAB_BLOCK). */
#define LOGIT_TILE_ROWS 4096.0

static uint64_t linear_params(int64_t out, int64_t in, bool bias) {
    return (uint64_t)(out * in + (bias ? out : 0));
}

uint64_t memory_plan_model_params(const ModelConfig *c) {
    int64_t H = c->hidden_size, I = c->intermediate_size;
    int64_t qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    uint64_t layer = linear_params(qd, H, c->qkv_bias) + 2 * linear_params(kvd, H, c->qkv_bias) +
                     linear_params(H, qd, c->o_bias) + 2 * linear_params(I, H, c->mlp_bias) +
                     linear_params(H, I, c->mlp_bias) + (uint64_t)(2 * H) +
                     (c->qk_norm ? (uint64_t)(2 * c->head_dim) : 0) +
                     (c->gemma_norms ? (uint64_t)(2 * H) : 0); /* Gemma 2's two output norms */
    uint64_t embed = (uint64_t)c->vocab_size * (uint64_t)H;
    return embed + (uint64_t)c->n_layers * layer + (uint64_t)H +
           (c->tie_word_embeddings ? 0 : embed);
}

uint64_t memory_plan_lora_params(const TrainConfig *cfg, const ModelConfig *mc) {
    if (!cfg->adapter || cfg->lora_r <= 0) return 0;
    const char *all_linear = "all-linear";
    const char *const *targets = (const char *const *)cfg->lora_target_modules;
    int n_targets = cfg->n_lora_target_modules;
    const char *defaults[] = {"q_proj", "v_proj"};
    if (cfg->lora_target_linear)
        targets = &all_linear, n_targets = 1;
    else if (n_targets == 0)
        targets = defaults, n_targets = 2;
    /* the adapter is small: laying it out for real gives lora.c's exact count */
    LoraAdapter a;
    memset(&a, 0, sizeof a);
    uint64_t n = 0;
    if (lora_create(&a, mc, (int)cfg->lora_r, 8, false, 0, targets, n_targets, 0) == 0)
        n = a.n_params;
    lora_free(&a);
    return n;
}

/* Bytes of the layer matrices quantised to NF4 (kernels/cpu/nf4.h); *values receives how many
 * values they hold. */
static double nf4_base_bytes(const ModelConfig *c, uint64_t *values) {
    size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    size_t shapes[7] = {qd * H, kvd * H, kvd * H, H * qd, I * H, I * H, H * I};
    double bytes = 0;
    *values = 0;
    for (int k = 0; k < 7; k++) {
        bytes += (double)nf4_bytes(shapes[k]);
        *values += shapes[k];
    }
    *values *= (uint64_t)c->n_layers;
    return bytes * c->n_layers;
}

static bool needs_frozen_reference(const TrainConfig *cfg) {
    bool kl_method = cfg->rl == RL_DPO || cfg->rl == RL_IPO || cfg->rl == RL_KTO ||
                     ((cfg->rl == RL_GRPO || cfg->rl == RL_GDPO) && cfg->grpo.beta != 0);
    /* with an adapter, the base with the adapter switched off is the reference */
    return kl_method && (!cfg->adapter || cfg->rl_adapter_ref_model);
}

/* Rows of one micro-batch and the tokens of each (upper bounds). */
static uint64_t micro_batch_tokens(const TrainConfig *cfg) {
    uint64_t rows = (uint64_t)cfg->micro_batch_size, len = (uint64_t)cfg->sequence_len;
    switch (cfg->rl) {
    case RL_DPO:
    case RL_IPO:
    case RL_ORPO:
    case RL_SIMPO:
    case RL_CPO:
    case RL_KTO: /* chosen + rejected; a KTO row and its KL row */
        rows *= 2;
        break;
    case RL_GRPO:
    case RL_GDPO:
        len += (uint64_t)cfg->grpo.max_completion_length;
        break;
    case RL_NONE:
        break;
    }
    return rows * len;
}

/* Bytes of the training tape, the backward's scratch and the logit chunks for n tokens (the
 * buffers of model/forward.c and model/backward.c). */
static double activation_bytes(const ModelConfig *c, uint64_t n, bool recompute) {
    double H = c->hidden_size, I = c->intermediate_size;
    double qd = (double)c->n_heads * c->head_dim, kvd = (double)c->n_kv_heads * c->head_dim;
    double pre = c->qk_norm ? qd + kvd : 0;
    pre += c->gemma_norms ? 2 * H : 0;                    /* Gemma 2: attn_out, mlp_out */
    double kept = 2 * H + 2 * qd + 2 * kvd + 2 * I + pre; /* per token and layer */
    double shared = 2 * H + I;
    double L = c->n_layers, N = (double)n;
    double tape = recompute ? N * (L * H + kept + shared) : N * (L * kept + shared);
    double edges = 3 * N * H;                                /* x_final, hidden, discard */
    double scratch = N * (2 * H + 2 * qd + 2 * kvd + 2 * I); /* backward */
    double head = 2 * N * H;                                 /* scored rows and their grads */
    return 4 * (tape + edges + scratch + head) + 2 * LOGIT_CHUNK_BYTES;
}

/* 8-bit AdamW's moments: a byte each plus a float scale per block; fp32 for small tensors and
 * the embedding. Tensor sizes are those of the model's layout. */
static double adamw8bit_bytes(const ModelConfig *c, uint64_t n_params) {
    uint64_t embed = (uint64_t)c->vocab_size * (uint64_t)c->hidden_size;
    uint64_t fp32 = embed; /* norms and biases are below Q8_MIN_NUMEL too, counted as 8-bit
                              here: they are a tiny share */
    uint64_t q8 = n_params > fp32 ? n_params - fp32 : 0;
    return 8.0 * (double)fp32 + 2.0 * ((double)q8 + 4.0 * ceil((double)q8 / Q8_BLOCK));
}

/* Bytes of the frozen base's embedding that stay resident: an untied embedding of a bf16
 * checkpoint is left in its file (model/embed_map.c), of which a forward keeps only its tokens'
 * rows, each with the kernel's fault-around (up to 64 KiB of mapped neighbours); otherwise the
 * whole table in bf16. */
static double frozen_embedding_bytes(const ModelConfig *c, uint64_t tokens) {
    double table = 2.0 * (double)c->vocab_size * (double)c->hidden_size;
    if (c->tie_word_embeddings || strcmp(c->weights_dtype, "bfloat16") != 0) return table;
    double rows = (double)tokens * (2.0 * (double)c->hidden_size + 65536.0);
    return rows < table ? rows : table;
}

MemoryPlan memory_plan_make(const TrainConfig *cfg, const ModelConfig *mc) {
    MemoryPlan p = {0};
    p.n_params = memory_plan_model_params(mc);
    uint64_t n_lora = memory_plan_lora_params(cfg, mc);
    p.n_trained = cfg->adapter ? n_lora : p.n_params;
    /* an adapter with bf16: true keeps the frozen base in bf16 (train/session.c); QLoRA its
     * layer matrices in NF4 and the rest in bf16 */
    bool frozen_bf16 = cfg->load_in_4bit || (cfg->adapter && cfg->bf16); /* session.c */
    double base_bytes = frozen_bf16 ? 2.0 : 4.0;
    p.tokens_per_micro = micro_batch_tokens(cfg);
    p.weights = base_bytes * (double)p.n_params + 4.0 * (double)n_lora;
    if (cfg->load_in_4bit) {
        uint64_t matrices;
        double nf4 = nf4_base_bytes(mc, &matrices);
        p.weights = nf4 + 2.0 * (double)(p.n_params - matrices) + 4.0 * (double)n_lora;
    }
    if (frozen_bf16) /* the embedding as model_load_frozen holds it */
        p.weights += frozen_embedding_bytes(mc, p.tokens_per_micro) -
                     2.0 * (double)mc->vocab_size * (double)mc->hidden_size;
    p.gradients = 4.0 * (double)p.n_trained;
    p.optimizer = optimizer_is_8bit(cfg->optimizer) && !cfg->adapter
                      ? adamw8bit_bytes(mc, p.n_params)
                      : 8.0 * (double)p.n_trained;
    if (needs_frozen_reference(cfg)) p.reference = (cfg->bf16 ? 2.0 : 4.0) * (double)p.n_params;
    p.activations = activation_bytes(mc, p.tokens_per_micro, cfg->gradient_checkpointing);
    if (cfg->rl == RL_GRPO || cfg->rl == RL_GDPO) {
        double seqs = cfg->grpo.generation_batch_size > 0 ? cfg->grpo.generation_batch_size : 1;
        double len = (double)(cfg->sequence_len + cfg->grpo.max_completion_length);
        double kvd = (double)mc->n_kv_heads * mc->head_dim;
        p.rollout = 2.0 * 4.0 * seqs * len * mc->n_layers * kvd;
        if (seqs >= 6) p.rollout += 4.0 * (double)p.n_params; /* the packed weights */
    }
    if (cfg->bf16) {
        double V = mc->vocab_size, H = mc->hidden_size, I = mc->intermediate_size,
               T = (double)p.tokens_per_micro;
        double qd = (double)mc->n_heads * mc->head_dim, kvd = (double)mc->n_kv_heads * mc->head_dim;
        if (gemm_bf16_path() == GEMM_BF16_NONE) {
            /* the rounded copies one product holds at a time (backend_autocast.c,
             * matmul_autocast.c): a trained lm_head's W rounded whole (an adapter's frozen bf16
             * lm_head is widened tile by tile) beside the hidden states; a linear's W beside
             * its rounded gradient and input (at most T x I each); the attention's q, k, v and
             * gradient (at most 4 T x H) */
            double head = (cfg->adapter ? 0.0 : 4.0 * V * H) + 4.0 * T * H,
                   linear = 4.0 * I * H + 8.0 * T * I, attention = 16.0 * T * H;
            if (attention > linear) linear = attention;
            p.autocast = head > linear ? head : linear;
        } else {
            /* gemm_bf16 rounds while it packs, so no fp32 rounded copies; what stays (all of it
             * kept between products, so added, not the largest of them):
             *  - the attention's rounded q, k, v and gradient (backend_autocast.c's kept set);
             *  - gemm_bf16's pool of released packings (gemm_bf16.c: up to 8, never given back):
             *    an activation's (T x I at most, bf16); over a frozen base, whose W is packed
             *    per product, also the largest layer matrix's (I x H) and an attention
             *    matrix's (qd x H: too small to reuse the former), and the frozen lm_head's two
             *    tiles (fused_logprob_autocast.c: VOCAB_BLOCK rows of H, two layouts);
             *  - under QLoRA, while its W is packed, the whole NF4 matrix dequantised to fp32
             *    (matmul_autocast.c: packed_weight);
             *  - a trained model: the cache's packings of its fp32 layer matrices, two bf16
             *    layouts each, kept from step to step (gemm_bf16_cache.c repacks them in
             *    place after each optimizer step), and the
             *    lm_head's, whole. */
            bool frozen = cfg->adapter;
            p.autocast = 4.0 * (2.0 * T * qd + 2.0 * T * kvd) + 2.0 * T * (I > H ? I : H);
            if (frozen) p.autocast += 2.0 * I * H + 2.0 * qd * H + 2.0 * 2.0 * LOGIT_TILE_ROWS * H;
            if (cfg->load_in_4bit) p.autocast += 4.0 * I * H;
            if (!frozen) {
                uint64_t matrices;
                nf4_base_bytes(mc, &matrices);
                p.autocast += 4.0 * (double)matrices + 4.0 * V * H;
            }
        }
        /* and a frozen bf16 reference's forward packings, its layer matrices and lm_head, made
         * once and kept for the run (gemm_bf16_keep_packed, train_reference_open) */
        if (needs_frozen_reference(cfg) && gemm_bf16_path() != GEMM_BF16_NONE) {
            uint64_t matrices;
            nf4_base_bytes(mc, &matrices);
            p.autocast += 2.0 * ((double)matrices + V * H);
        }
    }
    p.total = p.weights + p.gradients + p.optimizer + p.reference + p.activations + p.rollout +
              p.autocast;
    p.available = memory_available_bytes();
    return p;
}

/* A "key: value kB" line of /proc/meminfo, in bytes; -1 when absent. */
static double meminfo_bytes(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    double v = -1;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            v = strtod(line + klen + 1, NULL) * 1024.0;
            break;
        }
    fclose(f);
    return v;
}

/* One number from a cgroup v2 file; -1 when absent or "max". */
static double cgroup_value(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char text[64] = "";
    double v = -1;
    if (fgets(text, sizeof text, f) && strncmp(text, "max", 3) != 0) v = strtod(text, NULL);
    fclose(f);
    return v;
}

double memory_available_bytes(void) {
    double hook = test_hook_memory_available();
    if (hook >= 0) return hook;
    double avail = meminfo_bytes("MemAvailable");
    double limit = cgroup_value("/sys/fs/cgroup/memory.max");
    double used = cgroup_value("/sys/fs/cgroup/memory.current");
    if (limit > 0 && used >= 0 && (avail < 0 || limit - used < avail)) avail = limit - used;
    return avail;
}

/* Bytes for a person: MB below 10 GB, else GB with one decimal. buf holds 32 bytes. */
static const char *amount(double bytes, char *buf) {
    if (bytes < 10 * GB)
        snprintf(buf, 32, "%.0f MB", bytes / 1e6);
    else
        snprintf(buf, 32, "%.1f GB", bytes / GB);
    return buf;
}

void memory_plan_print(const MemoryPlan *p, FILE *log) {
    char b[8][32];
    fprintf(log,
            "memory plan: %s (weights %s, gradients %s, optimizer %s, reference %s, activations "
            "up to %s at %llu tokens a micro-batch, rollout %s)",
            amount(p->total, b[0]), amount(p->weights, b[1]), amount(p->gradients, b[2]),
            amount(p->optimizer, b[3]), amount(p->reference, b[4]), amount(p->activations, b[5]),
            (unsigned long long)p->tokens_per_micro, amount(p->rollout, b[6]));
    if (p->autocast > 0)
        fprintf(log,
                "; bf16 mixed precision: weights, gradients and optimizer fp32, matmul "
                "inputs rounded to bf16 (up to %s of rounded copies and packed weights)",
                amount(p->autocast, b[7]));
    if (p->available >= 0)
        fprintf(log, " of %s free\n", amount(p->available, b[7]));
    else
        fputs(" (free memory unknown)\n", log);
}

int memory_plan_check(const MemoryPlan *p, const TrainConfig *cfg) {
    if (p->available < 0 || p->total <= p->available) return 0;
    char knobs[1024] = "";
    size_t n = 0;
#define KNOB(...)                                                                                  \
    n += (size_t)snprintf(knobs + n, n < sizeof knobs ? sizeof knobs - n : 0, __VA_ARGS__)
    if (!cfg->gradient_checkpointing)
        KNOB("; gradient_checkpointing: true (keeps one layer's activations)");
    KNOB("; a smaller micro_batch_size (now %lld) or sequence_len (now %lld) for the "
         "activations (%.2f GB)",
         (long long)cfg->micro_batch_size, (long long)cfg->sequence_len, p->activations / GB);
    if (!cfg->adapter)
        KNOB("; adapter: lora (gradients and optimizer state of the adapter alone: now %.2f "
             "GB%s)",
             (p->gradients + p->optimizer) / GB,
             p->reference > 0 ? "; and the base with the adapter off is the reference" : "");
    else if (p->reference > 0)
        KNOB("; rl_adapter_ref_model: false (the base with the adapter off is the reference)");
    if (!optimizer_is_8bit(cfg->optimizer))
        KNOB("; optimizer: adamw_bnb_8bit (a quarter of the optimizer's %.2f GB)",
             p->optimizer / GB);
    if (cfg->adapter && !cfg->bf16)
        KNOB("; bf16: true (the frozen base in bf16: half of %.2f GB)", p->weights / GB);
    if (p->reference > 0 && !cfg->bf16)
        KNOB("; bf16: true (the reference in bf16: half of %.2f GB)", p->reference / GB);
#undef KNOB
    return err_set("%s: this run needs about %.2f GB (weights %.2f, gradients %.2f, optimizer "
                   "%.2f, reference %.2f, activations %.2f, rollout %.2f) but %.2f GB are free. "
                   "What shrinks it%s",
                   cfg->source, p->total / GB, p->weights / GB, p->gradients / GB,
                   p->optimizer / GB, p->reference / GB, p->activations / GB, p->rollout / GB,
                   p->available / GB, knobs);
}
