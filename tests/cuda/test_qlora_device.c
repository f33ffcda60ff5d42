/* QLoRA on the device (issue 29): `rlhf train` with adapter: qlora, load_in_4bit: true on
 * device: cuda-emu against device: cpu, two SFT steps of the tiny llama_text model (its layer
 * matrices quantised to NF4 as bitsandbytes does; train/device_frozen.h moves the NF4 base, the
 * bf16 embedding and the norms to the device; kernels/cuda/nf4.cu dequantises per product).
 * The logged loss and grad_norm agree to 1e-5 relative and the saved adapter to 1e-5 of its
 * largest weight (over all tensors), the bounds test_train_device_emu holds an fp32 base's
 * adapter to: only the products' order of summation differs (the dequantised weights are the
 * CPU's bit for bit, test_nf4_emu). Per tensor the gap is larger (measured 3e-5 of a lora_B's
 * largest): B starts at zero, so after two steps its entries are lr-sized AdamW steps of
 * near-eps gradients, which pass their relative roundoff straight through. */
#include "cli/commands.h"
#include "common/error.h"
#include "harness.h"
#include "trained_weights.h"
#include "train/train_device.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define REL 1e-5

static char config[4096];

static void write_config(void) {
    char data[8192], text[8192];
    size_t n = 0;
    for (int i = 0; i < 24; i++)
        n += (size_t)snprintf(data + n, sizeof data - n,
                              "{\"text\": \"The number %d comes after %d.\"}\n", i + 1, i);
    harness_write_file(harness_tmp_path("data.jsonl"), data, n);
    /* adam_epsilon 1e-4 as test_train_device_emu (a near-zero gradient's AdamW step is
     * otherwise roundoff) */
    snprintf(text, sizeof text,
             "base_model: %s\ndatasets:\n  - path: %s\n    type: completion\n"
             "sequence_len: 64\nmicro_batch_size: 4\ngradient_accumulation_steps: 1\n"
             "max_steps: 2\nlearning_rate: 1e-3\nlr_scheduler: constant\nwarmup_steps: 0\n"
             "logging_steps: 1\nseed: 3\nadam_epsilon: 1e-4\nadapter: qlora\nload_in_4bit: true\n"
             "lora_r: 4\nlora_alpha: 16\nlora_dropout: 0.1\nlora_target_linear: true\n",
             harness_source_path("tests/fixtures/models/llama_text"),
             harness_tmp_path("data.jsonl"));
    snprintf(config, sizeof config, "%s", harness_tmp_path("qlora.yaml"));
    harness_write_file(config, text, strlen(text));
}

static const char *run(const char *device, const char *name) {
    static char outs[2][4096];
    static int next;
    char *out = outs[next++ % 2];
    snprintf(out, 4096, "%s", harness_tmp_path(name));
    char *args[] = {config, "--device", (char *)device, "--output_dir", out};
    CHECK(cli_train(5, args) == CLI_EXIT_OK, "%s: %s", name, err_msg());
    return out;
}

int main(void) {
    train_device_register_linked();
    write_config();
    const char *cpu = run("cpu", "cpu");
    const char *dev = run("cuda-emu", "cuda-emu");
    json_t *a = harness_read_metrics(dev), *b = harness_read_metrics(cpu);
    CHECK(json_array_size(a) == 2 && json_array_size(b) == 2, "2 log rows each");
    for (size_t i = 0; i < 2 && json_array_size(a) == 2 && json_array_size(b) == 2; i++) {
        const char *keys[] = {"loss", "grad_norm"};
        for (int k = 0; k < 2; k++) {
            double x = harness_metric(a, i, keys[k]), y = harness_metric(b, i, keys[k]);
            CHECK(isfinite(x) && fabs(x - y) <= REL * fabs(y), "step %zu %s %.9g, cpu %.9g", i + 1,
                  keys[k], x, y);
            printf("step %zu %s: cuda-emu %.9g, cpu %.9g\n", i + 1, keys[k], x, y);
        }
    }
    json_decref(a), json_decref(b);
    char pa[4200], pb[4200];
    snprintf(pa, sizeof pa, "%s/adapter_model.safetensors", dev);
    snprintf(pb, sizeof pb, "%s/adapter_model.safetensors", cpu);
    double scale = 0, worst = 0, gap = safetensors_files_gap("adapter", pa, pb, &scale, &worst);
    CHECK(scale > 0 && gap <= REL * scale, "the adapters differ by %.3g (largest weight %.3g)", gap,
          scale);
    printf("adapter within %.3g of its largest weight (worst tensor %.3g of its own largest)\n",
           gap / scale, worst);
    return harness_finish("test_qlora_device_emu");
}
