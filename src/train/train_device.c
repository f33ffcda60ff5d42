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

/* What of cfg the CUDA backend cannot run, as "key 'K': why", or NULL when it runs all of it. */
static const char *unsupported(const TrainConfig *cfg) {
    if (optimizer_is_8bit(cfg->optimizer ? cfg->optimizer : ""))
        return "key 'optimizer': 8-bit AdamW (adamw_bnb_8bit) has no kernel on the CUDA backend; "
               "use optimizer: adamw_torch";
    if (cfg->load_in_4bit)
        return "key 'load_in_4bit': NF4 weights have no kernels on the CUDA backend";
    if (cfg->bf16 && cfg->adapter)
        return "key 'bf16': with an adapter the base is kept frozen in bf16, which the CUDA "
               "backend does not hold yet (bf16: true trains there without an adapter)";
    if (cfg->rl == RL_GRPO || cfg->rl == RL_GDPO)
        return "key 'rl': GRPO's generation does not run on the CUDA backend yet";
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
    Backend *be = cfg->bf16 ? p->open_bf16() : p->open(); /* invariant 4 */
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
            "device: %s%s: weights, gradients and AdamW moments in %s memory%s; checkpoints and "
            "the saved model copied to the host\n",
            want, is_auto ? " (cuda)" : "", be->name,
            cfg->bf16 ? ", products under bf16 autocast (each weight rounded to bf16 once a step)"
                      : "");
    return 0;
}

void train_device_close(TrainDevice *d) {
    if (d->provider && d->be) d->provider->close(d->be);
    memset(d, 0, sizeof *d);
}

void train_device_report_memory(const TrainDevice *d, FILE *log) {
    if (!d || !d->provider || !d->be || !d->provider->peak_memory) return;
    size_t in_use = 0, reserved = 0;
    d->provider->peak_memory(d->be, &in_use, &reserved);
    fprintf(log, "device memory (%s): peak %.0f MB in use, %.0f MB reserved\n", d->be->name,
            (double)in_use / (1 << 20), (double)reserved / (1 << 20));
}

int train_device_status(const TrainDevice *d) {
    if (!d->provider || !d->be) return 0;
    return d->provider->status(d->be);
}
