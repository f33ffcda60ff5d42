#include "train/train_device.h"

#include "common/error.h"
#include "dist/dist_device.h"

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
    if (cfg->rl == RL_GRPO || cfg->rl == RL_GDPO) {
        const char *why = grpo_unsupported(&cfg->grpo);
        if (why) return why;
    }
    if (cfg->adapter && cfg->lora_model_dir && cfg->rl != RL_NONE && !cfg->rl_adapter_ref_model)
        return "key 'lora_model_dir': the reference adapter loaded from it is kept on the CPU";
    return NULL;
}

/* Several ranks (invariant 4): p's collective into *comm. Returns 0; 1 (under auto) or -1 (with
 * device: written) with an error saying why there is none. Every rank gets the same answer:
 * the build decides whether there is one, and dist_open agrees its failures over the ranks. */
static int open_collective(const TrainDeviceProvider *p, const DistDeviceComm **comm,
                           const char *want, const char *source) {
    bool is_auto = strcmp(want, "auto") == 0;
    if (!p->dist_open) {
        err_set("several ranks (%d) on the %s backend: %s", dist_size(), p->name,
                p->no_dist ? p->no_dist : "this build has no collective for its memory");
        return is_auto ? 1 : err_prefix("%s: key 'device': %s", source, want);
    }
    *comm = p->dist_open();
    if (*comm) return 0;
    return is_auto ? 1 : err_prefix("%s: key 'device': %s", source, want);
}

/* After p->open on every rank: 0 when every rank has its backend in *be; else -1 with an error
 * on every rank (its own, or which rank failed first), *be closed and NULL, comm closed. */
static int open_on_every_rank(const TrainDeviceProvider *p, Backend **be,
                              const DistDeviceComm *comm) {
    int first_failed = dist_allreduce_min_int(*be ? dist_size() : dist_rank());
    if (first_failed == dist_size()) return 0;
    if (*be) {
        p->close(*be);
        *be = NULL;
        err_set("rank %d could not open its %s device", first_failed, p->name);
    }
    if (comm->close) comm->close();
    return -1;
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
    const DistDeviceComm *comm = NULL;
    if (dist_size() > 1 && !why) {
        int rc = open_collective(p, &comm, want, cfg->source);
        if (rc < 0) return -1;
        if (rc > 0) { /* auto: the CPU, for every rank alike; quiet as below when no GPU */
            if (written || !p->dist_open)
                fprintf(log, "device: auto: training on the CPU (%s)\n", err_msg());
            err_clear();
            return 0;
        }
    }
    Backend *be = cfg->bf16 ? p->open_bf16() : p->open(); /* invariant 5 */
    if (comm && open_on_every_rank(p, &be, comm) != 0) {
        if (!is_auto) return err_prefix("%s: key 'device': %s", cfg->source, want);
        fprintf(log, "device: auto: training on the CPU (%s)\n", err_msg());
        err_clear();
        return 0;
    }
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
    if (comm) dist_device_attach(be, comm);
    const char *precision =
        !cfg->bf16     ? ""
        : cfg->adapter ? ", products under bf16 autocast (the frozen base read as the bf16 "
                         "values it holds, the adapter's branch in fp32)"
                       : ", products under bf16 autocast (each weight rounded to bf16 "
                         "once a step)";
    fprintf(log,
            "device: %s%s: %s in %s memory%s; checkpoints and the saved model copied to the host\n",
            want, is_auto ? " (cuda)" : "",
            cfg->adapter ? "the frozen base, the adapter, its gradients and AdamW moments"
                         : "weights, gradients and AdamW moments",
            be->name, precision);
    return 0;
}

void train_device_close(TrainDevice *d) {
    if (d->provider && d->be && dist_size() > 1) dist_device_attach(d->be, NULL);
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
