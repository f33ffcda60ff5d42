/* Several ranks on a device backend (issue 29, src/dist/dist_device.h): `rlhf train --nproc 2`
 * with device: cuda-emu against the same two ranks with device: cpu, two steps each of full SFT
 * with ZeRO-1 (the gradients reduce-scattered in device memory, each rank's AdamW slice on the
 * device, the weight slices all-gathered) and of full DPO with ZeRO-0 (the gradients
 * all-reduced). Per step the logged metrics agree to 1e-5 relative (1e-6 absolute) and the saved
 * weights to 1e-5 of the largest: the bound test_train_device_emu holds one rank to, since the
 * only difference is the backends' order of summation (both sides sum the ranks through the same
 * MPI collectives). Each run's log must say that it trained on cuda-emu, so a run that fell back
 * to the CPU fails. (A LoRA adapter is left out: B starts at zero, so after two steps its
 * entries are lr-sized and AdamW passes the relative roundoff of near-eps gradients straight
 * into them; measured 2.4e-5 of a tensor's largest for DPO with dropout, against 1e-7 here.)
 *
 * GRPO on 2 ranks (grpo-2ranks): each rank generates its own group on the device (grpo_rng:
 * streams, the draws of several ranks), scores it on the host and trains; the completions rank 0
 * logs must be the CPU's texts, every metric within the bound above. bf16 on 2 ranks
 * (dpo-bf16-zero1): DPO with ZeRO-1 under bf16 autocast on both sides, within
 * test_train_device_emu's DPO bf16 bound, 1e-2 relative and of the largest weight (the file
 * comment there derives it: both sides round the same values, but an output whose fp32 sums
 * straddle a bf16 midpoint rounds the other way, and DPO's differences of nearly equal
 * log-probs magnify that; measured here 2.2e-3 on the step-2 loss), on loss and grad_norm as
 * there: the implicit rewards and the mean logit are small differences of large sums, which
 * bf16's flips move by several percent. It is what catches bf16
 * copies of the weights kept across ZeRO-1's all-gather (dist_device.h invariant 4): step 2 then
 * multiplies the other rank's slice as it was before step 1's update (measured: step-2 loss
 * 0.5817 against the CPU's 0.5047, 15%). (SFT under bf16 is not the case here: on 2 ranks with
 * ZeRO-1 its full fine-tuning lands 9.1e-4 (metrics) and 5.5e-4 (weights) from the CPU's run,
 * step-1 gradients up to 5.4e-3 of a tensor's largest in layer 0, beyond SFT's 1e-4 bound. That is
 * a bf16 flip, not a missed rounding: the CPU run with its AVX-512 bf16 GEMM instead of AMX (the
 * same rounding, another sum order) lands on the same figures, while its sgemm path is within 1e-5
 * of AMX's; one rank alone, micro-batches of 1 as here, agrees with the CPU to 2e-7.)
 *
 * bf16 x adapter x ranks (dpo-lora-bf16-zero1): the same DPO with a LoRA adapter over the
 * base frozen in bf16 (its lora_dropout inert: rl methods switch dropout off, as TRL's
 * disable_dropout), ZeRO-1 under bf16 on both sides. loss and grad_norm within
 * REL_BF16 as above (measured: step 2 3.2e-4 and 1.4e-4; step 1 equal). The adapter has no
 * a-priori bound of its own: B starts at zero, after two AdamW steps its entries are about 2 lr,
 * and a gradient entry within bf16 roundoff of zero can turn an entry's step, so each tensor's
 * relative gap can reach 1. It must instead lie nearer the CPU's bf16 run than ADAPTER_SHARE (a
 * quarter, as the SFT bf16 cases of test_train_device_emu) of the CPU's fp32 run's distance
 * from it (measured: 1.27e-2 of a tensor's largest against 1.24; in the sanitizer build, whose CPU
 * autocast takes other kernels, 3.4e-2 against 1.21). The 3.2e-4 on the loss is the
 * flips of the file comment in the bf16 base's forward, not the ranks: the same figures, bit for
 * bit, with ZeRO-0, on one rank with 2 micro-batches of one pair and with one of two pairs; at
 * step 2 the policy's log-prob sums agree to 9 digits, the reference's (the base, adapter off)
 * differ on the second pair only (1.4e-3, 1.0e-2 of sums of ~40 and ~100), and with lr 1e-30 the
 * policy's differ alike (so the base forward, not the adapter's switch). Leaving out
 * be->written (dist_device.h invariant 4) fails nothing here: the adapter's branch is fp32 and
 * the frozen base is never written, so no bf16 copy of anything the all-gather writes exists.
 * The adapter left on the device when the run copies back to the host (device_residency.c) fails
 * it (1 of a tensor's largest against fp32's 1.24; a share of 1 would have passed it).
 *
 * The program of a build without nvcc trains on cuda-emu; a CUDA build's program has the
 * device backend instead, so there this test runs a copy of the program linked with cuda-emu
 * (tests/CMakeLists.txt sets RLHF_TEST_BINARY_DIR to it). Skipped (77) without MPI. */
#include "dist_harness.h"
#include "harness.h"
#include "logged_completions.h"

#include "common/error.h"
#include "common/fileio.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* DPO's bound under bf16 autocast (test_train_device.c's REL_BF16_DPO; the file comment) */
#define REL_BF16 1e-2
/* An adapter under bf16: its distance from the CPU's bf16 run, as a share of the CPU's fp32
 * run's (the file comment) */
#define ADAPTER_SHARE 0.25

static void write_configs(void) {
    char data[8192], text[8192];
    size_t n = 0;
    for (int i = 0; i < 24; i++)
        n += (size_t)snprintf(data + n, sizeof data - n,
                              "{\"text\": \"The number %d comes after %d.\"}\n", i + 1, i);
    harness_write_file(harness_tmp_path("text.jsonl"), data, n);
    harness_write_arith_pairs("pairs.jsonl", 16);
    const char *model = harness_source_path("tests/fixtures/models/llama_text");
    /* adam_epsilon 1e-4, as test_train_device_emu: a gradient within roundoff of zero would
     * otherwise take an AdamW step whose size and sign are roundoff */
    const char *common = "sequence_len: 64\nmicro_batch_size: 1\ngradient_accumulation_steps: 1\n"
                         "max_steps: 2\nlearning_rate: 1e-3\nlr_scheduler: constant\n"
                         "warmup_steps: 0\nlogging_steps: 1\nseed: 3\nadam_epsilon: 1e-4\n";
    snprintf(text, sizeof text,
             "base_model: %s\ndatasets:\n  - path: %s\n    type: completion\n%s"
             "dataset_prepared_path: %s\n",
             model, harness_tmp_path("text.jsonl"), common, harness_tmp_path("prepared"));
    harness_write_file(harness_tmp_path("sft.yaml"), text, strlen(text));
    snprintf(text, sizeof text,
             "base_model: %s\nrl: dpo\nrl_beta: 0.1\ndatasets:\n  - path: %s\n%s"
             "dataset_prepared_path: %s\n",
             model, harness_tmp_path("pairs.jsonl"), common, harness_tmp_path("prepared"));
    harness_write_file(harness_tmp_path("dpo.yaml"), text, strlen(text));
    /* the same DPO with a LoRA adapter, as test_train_device_emu's lora_keys */
    snprintf(text + strlen(text), sizeof text - strlen(text),
             "adapter: lora\nlora_r: 4\nlora_alpha: 16\nlora_dropout: 0.1\n"
             "lora_target_linear: true\n");
    harness_write_file(harness_tmp_path("dpo_lora.yaml"), text, strlen(text));
    /* GRPO as test_train_device_emu's (one group of 4 completions of 4 tokens a rank and step,
     * a reward some completions miss, beta so the reference is read), on per-completion streams:
     * torch's one generator is refused on several ranks */
    snprintf(text, sizeof text,
             "base_model: %s\nrl: grpo\ndatasets:\n  - path: %s\n"
             "trl:\n  num_generations: 4\n  max_completion_length: 4\n  beta: 0.05\n"
             "  log_completions: true\n  num_completions_to_print: 0\n"
             "  reward_funcs:\n    - {function: builtin.format, pattern: \"e\", match: search}\n"
             "micro_batch_size: 4\ngradient_accumulation_steps: 1\nmax_steps: 2\n"
             "learning_rate: 5e-3\nlr_scheduler: constant\nwarmup_steps: 0\nseed: 6\n"
             "logging_steps: 1\nadam_epsilon: 1e-4\ngrpo_rng: streams\n",
             model, harness_write_grpo_prompts());
    harness_write_file(harness_tmp_path("grpo.yaml"), text, strlen(text));
}

/* config on 2 ranks with device: cpu and device: cuda-emu (plus extra, NULL-terminated),
 * compared as the header says. */
static void cpu_vs_emu(const char *name, const char *config, const char *const *extra, double rel) {
    char cpu[4096], emu[4200], log[4300];
    snprintf(cpu, sizeof cpu, "%s", harness_tmp_path(name));
    snprintf(emu, sizeof emu, "%s-emu", cpu);
    snprintf(log, sizeof log, "%s", harness_tmp_path("train.log"));
    const char *a[16] = {"--nproc", "2", "--device", "cpu"},
               *b[16] = {"--nproc", "2", "--device", "cuda-emu"};
    int n = 4;
    for (int i = 0; extra[i] && n < 15; i++, n++)
        a[n] = b[n] = extra[i];
    a[n] = b[n] = NULL;
    /* bf16: the CPU ranks keep attention's P and dS exact (RLHF_AUTOCAST_ATTENTION=exact, which
     * they inherit), as the device does (three bf16 parts, attention_mma.h); by default the CPU
     * rounds them as torch does (test_train_device_emu; the adapter case measured 0.862 of
     * fp32's distance so) */
    const char *env = getenv("RLHF_AUTOCAST_ATTENTION");
    char *kept = env ? strdup(env) : NULL; /* put back after */
    if (rel > 1e-5) setenv("RLHF_AUTOCAST_ATTENTION", "exact", 1);
    CHECK(dist_train(config, cpu, a) == 0, "%s: 2 ranks on the CPU", name);
    if (kept)
        setenv("RLHF_AUTOCAST_ATTENTION", kept, 1);
    else
        unsetenv("RLHF_AUTOCAST_ATTENTION");
    free(kept);
    remove(log);
    CHECK(dist_train(config, emu, b) == 0, "%s: 2 ranks on cuda-emu", name);
    bool adapter = strstr(config, "lora") != NULL;
    CHECK(dist_log_mentions(log, adapter
                                     ? "device: cuda-emu: the frozen base, the adapter, its "
                                       "gradients and AdamW moments"
                                     : "device: cuda-emu: weights, gradients and AdamW moments"),
          "%s: the 2 ranks said they trained on cuda-emu", name);
    if (rel > 1e-5) { /* bf16: loss and grad_norm, as test_train_device_emu's bf16 cases */
        json_t *x = harness_read_metrics(cpu), *y = harness_read_metrics(emu);
        CHECK(json_array_size(x) == 2 && json_array_size(y) == 2, "%s: %zu and %zu log lines", name,
              json_array_size(x), json_array_size(y));
        for (size_t i = 0; i < 2 && json_array_size(x) == 2 && json_array_size(y) == 2; i++)
            for (int k = 0; k < 2; k++) {
                const char *key = k ? "grad_norm" : "loss";
                double p = harness_metric(x, i, key), q = harness_metric(y, i, key);
                CHECK(harness_close(q, p, rel, 0), "%s: step %zu %s %.9g, cpu %.9g", name, i + 1,
                      key, q, p);
                printf("%s: step %zu %s %.9g, cpu %.9g (rel %.2g)\n", name, i + 1, key, q, p,
                       fabs(q - p) / fabs(p));
            }
        json_decref(x), json_decref(y);
    } else {
        dist_compare_metrics_within(name, cpu, emu, rel, 1e-6);
    }
    if (adapter && rel > 1e-5) { /* the header: against the CPU's fp32 run's distance */
        char fp32[4300];
        snprintf(fp32, sizeof fp32, "%s-fp32", cpu);
        const char *c[16] = {"--nproc", "2", "--device", "cpu"};
        int k = 4;
        for (int i = 0; extra[i] && k < 15; i++)
            if (strcmp(extra[i], "--bf16") == 0)
                i++;
            else
                c[k++] = extra[i];
        c[k] = NULL;
        CHECK(dist_train(config, fp32, c) == 0, "%s: 2 ranks on the CPU in fp32", name);
        double gap = dist_outputs_gap(cpu, emu), gap_fp32 = dist_outputs_gap(cpu, fp32);
        CHECK(gap < ADAPTER_SHARE * gap_fp32,
              "%s: the adapter is %.3g of a tensor's largest off the cpu's bf16, the cpu's fp32 "
              "%.3g: not nearer than %.2g of it",
              name, gap, gap_fp32, ADAPTER_SHARE);
        printf("%s: adapter within %.3g of each tensor's largest (the cpu's fp32: %.3g)\n", name,
               gap, gap_fp32);
    } else {
        dist_compare_outputs_within(name, cpu, emu, rel);
    }
    if (strcmp(config, "grpo.yaml") == 0)
        logged_completions_same(name, cpu, "cpu", emu, "cuda-emu", 2 * 2 * 4);
}

/* Case names as arguments run those alone. */
static bool chosen(int argc, char **argv, const char *name) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0) return true;
    return argc < 2;
}

int main(int argc, char **argv) {
    if (!dist_tests_can_run("test_dist_device_emu")) return 77;
    write_configs();
    const char *zero0[] = {NULL}, *zero1[] = {"--zero_stage", "1", NULL},
               *bf16_zero1[] = {"--bf16", "true", "--zero_stage", "1", NULL};
    if (chosen(argc, argv, "sft-zero1")) cpu_vs_emu("sft-zero1", "sft.yaml", zero1, 1e-5);
    if (chosen(argc, argv, "dpo")) cpu_vs_emu("dpo", "dpo.yaml", zero0, 1e-5);
    if (chosen(argc, argv, "grpo-2ranks")) cpu_vs_emu("grpo-2ranks", "grpo.yaml", zero0, 1e-5);
    if (chosen(argc, argv, "dpo-bf16-zero1"))
        cpu_vs_emu("dpo-bf16-zero1", "dpo.yaml", bf16_zero1, REL_BF16);
    if (chosen(argc, argv, "dpo-lora-bf16-zero1"))
        cpu_vs_emu("dpo-lora-bf16-zero1", "dpo_lora.yaml", bf16_zero1, REL_BF16);
    printf("worst: metrics %.2g relative, weights %.2g of the largest\n", dist_worst.metric,
           dist_worst.weight);
    return harness_finish("test_dist_device_emu");
}
