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
 * The program of a build without nvcc trains on cuda-emu; a CUDA build's program has the
 * device backend instead, so there this test runs a copy of the program linked with cuda-emu
 * (tests/CMakeLists.txt sets RLHF_TEST_BINARY_DIR to it). Skipped (77) without MPI. */
#include "dist_harness.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>

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
}

/* config on 2 ranks with device: cpu and device: cuda-emu (plus extra, NULL-terminated),
 * compared as the header says. */
static void cpu_vs_emu(const char *name, const char *config, const char *const *extra) {
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
    CHECK(dist_train(config, cpu, a) == 0, "%s: 2 ranks on the CPU", name);
    remove(log);
    CHECK(dist_train(config, emu, b) == 0, "%s: 2 ranks on cuda-emu", name);
    CHECK(dist_log_mentions(log, "device: cuda-emu: weights, gradients and AdamW moments"),
          "%s: the 2 ranks said they trained on cuda-emu", name);
    dist_compare_metrics(name, cpu, emu);
    dist_compare_outputs(name, cpu, emu);
}

int main(void) {
    if (!dist_tests_can_run("test_dist_device_emu")) return 77;
    write_configs();
    const char *zero0[] = {NULL}, *zero1[] = {"--zero_stage", "1", NULL};
    cpu_vs_emu("sft-zero1", "sft.yaml", zero1);
    cpu_vs_emu("dpo", "dpo.yaml", zero0);
    printf("worst: metrics %.2g relative, weights %.2g of the largest\n", dist_worst.metric,
           dist_worst.weight);
    return harness_finish("test_dist_device_emu");
}
