#include "train/train_device.h"

#include "common/error.h"
#include "dist/dist.h"

#include <string.h>

#define MAX_PROVIDERS 4

static const TrainDeviceProvider *providers[MAX_PROVIDERS];

void train_device_register(const TrainDeviceProvider *p) {
    for (int i = 0; i < MAX_PROVIDERS; i++)
        if (!providers[i] || strcmp(providers[i]->name, p->name) == 0) {
            providers[i] = p;
            return;
        }
}

static const TrainDeviceProvider *provider_named(const char *name) {
    for (int i = 0; i < MAX_PROVIDERS && providers[i]; i++)
        if (strcmp(providers[i]->name, name) == 0) return providers[i];
    return NULL;
}

/* What of a GRPO run's settings the device path does not run, as "key 'K': why": what reads or
 * writes the policy's weights on the host (the device keeps them in its memory for the whole
 * loop: device_residency.h), and the replay buffer, not checked there yet; NULL when the run
 * generates, scores and trains with the device's weights alone. */
static const char *grpo_unsupported(const GrpoConfig *g) {
    if (g->replay_buffer_size > 0)
        return "key 'trl.replay_buffer_size': the replay buffer is not run on the CUDA backend "
               "yet";
    if (g->rollout_func)
        return "key 'trl.rollout_func': a Python rollout function drives the CPU's engine";
    if (g->vllm_server_url)
        return "key 'trl.vllm_mode': server mode pushes the weights from host memory";
    if (g->sync_ref_model)
        return "key 'trl.sync_ref_model': the reference's mix with the policy runs on the host";
    return NULL;
}

/* What of cfg the CUDA backend cannot run, as "key 'K': why", or NULL when it runs all of it. */
static const char *unsupported(const TrainConfig *cfg) {
    if (optimizer_is_8bit(cfg->optimizer ? cfg->optimizer : ""))
        return "key 'optimizer': 8-bit AdamW (adamw_bnb_8bit) has no kernel on the CUDA backend; "
               "use optimizer: adamw_torch";
    if (cfg->load_in_4bit)
        return "key 'load_in_4bit': NF4 weights have no kernels on the CUDA backend";
    if (cfg->bf16)
        return "key 'bf16': bf16 autocast (and a base frozen in bf16) is CPU-only so far";
    if (cfg->rl == RL_GRPO || cfg->rl == RL_GDPO) {
        const char *why = grpo_unsupported(&cfg->grpo);
        if (why) return why;
    }
    if (cfg->adapter && cfg->lora_model_dir && cfg->rl != RL_NONE && !cfg->rl_adapter_ref_model)
        return "key 'lora_model_dir': the reference adapter loaded from it is kept on the CPU";
    if (dist_size() > 1) return "several ranks: the gradients are summed over MPI in host memory";
    return NULL;
}

int train_device_open(TrainDevice *d, const TrainConfig *cfg, FILE *log) {
    memset(d, 0, sizeof *d);
    const char *want = cfg->device ? cfg->device : "auto";
    bool written = cfg->device && cfg->raw && json_object_get(cfg->raw, "device");
    if (strcmp(want, "cpu") == 0) return 0;
    bool is_auto = strcmp(want, "auto") == 0;
    const char *name = is_auto ? "cuda" : want;
    const TrainDeviceProvider *p = provider_named(name);
    const char *why = unsupported(cfg);
    if (!is_auto) {
        if (!p)
            return err_set("%s: key 'device': %s: this build of rlhf has no %s backend (%s)",
                           cfg->source, want, name,
                           strcmp(name, "cuda") == 0
                               ? "build it where nvcc and cuBLASLt are found, or use device: cpu"
                               : "cuda-emu is in the rlhf program of builds without nvcc");
        if (why) return err_set("%s: device: %s: %s", cfg->source, want, why);
    } else if (!p) {
        if (written)
            fprintf(log, "device: auto: training on the CPU (this build has no CUDA backend)\n");
        return 0;
    }
    Backend *be = p->open();
    if (!be) {
        if (!is_auto) return err_prefix("%s: key 'device': %s", cfg->source, want);
        /* a CUDA build without a GPU: the CPU, as HF's Trainer; said only when the key was set */
        if (written)
            fprintf(log, "device: auto: training on the CPU (no CUDA device answers: %s)\n",
                    err_msg());
        err_clear();
        return 0;
    }
    if (why) { /* auto, a device is there, and the run needs what it lacks: always said */
        p->close(be);
        fprintf(log, "device: auto: training on the CPU (%s)\n", why);
        return 0;
    }
    d->provider = p;
    d->be = be;
    fprintf(log,
            "device: %s%s: weights, gradients and AdamW moments in %s memory; checkpoints and the "
            "saved model copied to the host\n",
            want, is_auto ? " (cuda)" : "", be->name);
    return 0;
}

void train_device_close(TrainDevice *d) {
    if (d->provider && d->be) d->provider->close(d->be);
    memset(d, 0, sizeof *d);
}

int train_device_status(const TrainDevice *d) {
    if (!d->provider || !d->be) return 0;
    return d->provider->status(d->be);
}
