/* Architecture configuration of a Llama-family causal LM, read from a Hugging Face
 * config.json (spec: hf-formats.md §2). Both transformers v4 keys (rope_theta,
 * rope_scaling, torch_dtype) and v5 keys (rope_parameters, dtype) are understood. */
#ifndef RLHF_MODEL_CONFIG_H
#define RLHF_MODEL_CONFIG_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum {
    ARCH_LLAMA,
    ARCH_MISTRAL,
    ARCH_QWEN2,
    ARCH_QWEN3,
    ARCH_PHI3,
    ARCH_SMOLLM3,
    ARCH_GEMMA2,
    ARCH_GEMMA3
} ModelArch;

/* The MLP's gate activation: SiLU (SwiGLU) or GELU with the tanh approximation (Gemma's
 * gelu_pytorch_tanh). */
typedef enum { MLP_ACT_SILU, MLP_ACT_GELU_TANH } MlpAct;

typedef enum {
    ROPE_DEFAULT,
    ROPE_LINEAR,
    ROPE_DYNAMIC,
    ROPE_LLAMA3,
    ROPE_YARN,
    ROPE_LONGROPE
} RopeType;

typedef struct {
    RopeType type;
    double theta;
    double factor;                 /* linear, dynamic, llama3, yarn */
    double low_freq_factor;        /* llama3 */
    double high_freq_factor;       /* llama3 */
    double original_max_position;  /* llama3, yarn, longrope */
    double attention_factor;       /* yarn: < 0 when not given; longrope: the resolved factor */
    double beta_fast, beta_slow;   /* yarn */
    double mscale, mscale_all_dim; /* yarn; 0 when not given */
    bool truncate;                 /* yarn */
    /* longrope: the hd/2 divisors of the frequencies, short_factor while a batch's positions
     * stay within original_max_position, long_factor once they reach past it (fp32, as
     * transformers holds them); NULL for the other types. Owned by the config. */
    float *short_factor, *long_factor;
} RopeConfig;

typedef struct {
    ModelArch arch;
    int vocab_size;        /* V: rows of embed_tokens / lm_head */
    int hidden_size;       /* H */
    int intermediate_size; /* I */
    int n_layers;          /* L */
    int n_heads;           /* nh */
    int n_kv_heads;        /* nkv; divides nh */
    int head_dim;          /* hd; nh*hd need not equal H */
    int rotary_dim; /* the leading dims of a head RoPE rotates: int(hd * partial_rotary_factor),
                       hd unless the config sets the factor (Phi-4-mini: 0.75) */
    double rms_norm_eps;
    int64_t max_position_embeddings;
    bool tie_word_embeddings;
    bool qkv_bias; /* q/k/v projections have biases */
    bool o_bias;   /* o_proj has a bias (Llama/Qwen3 attention_bias) */
    bool mlp_bias; /* gate/up/down have biases (Llama mlp_bias) */
    bool qk_norm;  /* Qwen3, Gemma 3: RMSNorm over hd on q and k before RoPE ((1 + w) in Gemma 3) */
    bool fused_qkv_mlp; /* Phi-3: one qkv_proj (q, k, v rows) and one gate_up_proj (gate, up
                           rows) tensor on disk; wk/wv/w_up point into them (model.h) */
    /* Gemma 2. Its RMSNorms scale by (1 + w) (w stored centred on 0), and a second norm follows
     * each block's output before the residual add (post_attention_layernorm after o_proj,
     * post_feedforward_layernorm after down_proj; the MLP's input norm is then
     * pre_feedforward_layernorm). */
    bool gemma_norms;
    MlpAct mlp_act;
    bool embed_scaled;   /* embeddings multiplied by sqrt(H) (Gemma's normalizer) */
    float attn_scale;    /* the attention scores' factor: 1/sqrt(hd) (also when 0), or Gemma's
                            query_pre_attn_scalar^-1/2 */
    float attn_softcap;  /* scores s -> c tanh(s / c) before the mask; 0 = none */
    float final_softcap; /* logits z -> c tanh(z / c); 0 = none */
    int sliding_window;  /* window length for layers flagged below; 0 = none */
    bool *layer_sliding; /* [n_layers]: this layer uses the sliding window */
    bool *layer_nope;    /* [n_layers]: this layer applies no RoPE to q and k (SmolLM3's NoPE
                            layers, no_rope_layers[l] == 0); false everywhere for other families */
    RopeConfig rope;
    /* Gemma 3: the sliding layers rotate q and k with a RoPE of their own (rope_local_base_freq,
     * rope_parameters.sliding_attention), the others with `rope` (rope_theta, rope_scaling,
     * rope_parameters.full_attention). local_rope false: every layer uses `rope`. */
    bool local_rope;
    RopeConfig rope_local;
    char weights_dtype[16]; /* "float32", "bfloat16", "float16" or "" when unstated */
    int pad_token_id;       /* -1 when none: that embedding row gets no gradient */
} ModelConfig;

/* Parses a config.json object. `source` names the file in messages. Returns 0, or -1 with
 * an error naming the key and what was expected (unsupported model_type, a missing size,
 * heads that do not divide, quantization or remote code, ...). */
int model_config_from_json(ModelConfig *cfg, const json_t *root, const char *source);

/* Reads DIR/config.json. */
int model_config_load(ModelConfig *cfg, const char *dir);

void model_config_free(ModelConfig *cfg);

const char *model_arch_name(ModelArch arch);

#endif
