/* torch's CPU generator (at::CPUGeneratorImpl) and the draws its CPU kernels make from it, so
 * that a seed in the YAML gives the data order and the fresh LoRA weights a TRL/Axolotl run gets
 * from the same seed (issue 34). Settled from PyTorch's source (aten/src/ATen):
 *   - the engine is MT19937 (core/MT19937RNGEngine.h), seeded with the low 32 bits of the
 *     64-bit seed by the reference init_genrand recurrence; manual_seed(s) with s < 0 uses s
 *     modulo 2^64;
 *   - random() is one 32-bit draw; random64() is two, the first one the high half
 *     (CPUGeneratorImpl.cpp, make64BitsFrom32Bits(hi, lo));
 *   - randperm (native/TensorFactories.cpp randperm_cpu): for n < UINT32_MAX / 20, a forward
 *     Fisher-Yates where step i swaps i with i + random() % (n - i), i < n - 1; above that, the
 *     inside-out variant with random64() % (i + 1);
 *   - uniform_(from, to) (native/cpu/DistributionTemplates.h, core/TransformationHelper.h
 *     uniform_real): float32 takes random() & (2^24 - 1), scaled by 2^-24, as x * (to - from) +
 *     from in float (from and to first rounded to float); float64 takes random64() & (2^53 - 1)
 *     by 2^-53 in double. One draw per element, in memory order, serially. torch's AVX2 and
 *     AVX512 kernels (every x86-64 CPU since 2013; torch.backends.cpu.get_cpu_capability())
 *     are compiled with FMA, and the compiler fuses x * range + from into one rounding: so do
 *     we (fmaf/fma). Only torch forced to ATEN_CPU_CAPABILITY=default rounds twice and differs
 *     in the last bits where x * range + from cancels;
 *   - exponential_() (lambda 1) on float32, as torch.multinomial(probs, 1) draws it
 *     (native/Distributions.cpp: argmax(probs / q) over q = empty_like(probs).exponential_()):
 *     per element in memory order, u = (random64() & (2^53 - 1)) * 2^-53 and -log1p(-u) in
 *     double, rounded to float (templates::cpu::exponential_kernel). Some builds route this
 *     through MKL's VSL stream instead; the PyPI CPU wheel of torch 2.15 on an x86-64 CPU does
 *     not (checked bit for bit, tests/test_torch_rng.c);
 *   - kaiming_uniform_(w, a) (torch/nn/init.py, fan_in mode, leaky_relu):
 *     bound = sqrt(3) * sqrt(2 / (1 + a^2)) / sqrt(fan_in) in double, then uniform_(-bound, bound).
 * Every result here is bit-identical to torch's (tests/test_torch_rng.c against
 * tools/reference/make_torch_rng_fixtures.py). */
#ifndef RLHF_COMMON_TORCH_GENERATOR_H
#define RLHF_COMMON_TORCH_GENERATOR_H

#include <stddef.h>
#include <stdint.h>

#define TORCH_MT_STATE_WORDS 624

/* One torch.Generator on the CPU. Invariants:
 *   1. 1 <= left <= TORCH_MT_STATE_WORDS: left - 1 words of state remain unread before the
 *      next twist (left == 1 right after seeding: the first draw twists);
 *   2. next = TORCH_MT_STATE_WORDS - (left - 1) after the first twist: the index of the word
 *      the next draw tempers. */
typedef struct {
    uint32_t state[TORCH_MT_STATE_WORDS];
    int left, next;
} TorchGenerator;

/* torch.Generator().manual_seed(seed) (and torch.manual_seed's CPU part): seeds g. Any seed. */
void torch_generator_seed(TorchGenerator *g, int64_t seed);

/* CPUGeneratorImpl::random(): the next 32 bits of the stream. */
uint32_t torch_generator_random(TorchGenerator *g);

/* CPUGeneratorImpl::random64(): two draws, the first the high 32 bits. */
uint64_t torch_generator_random64(TorchGenerator *g);

/* torch.randperm(n, generator=g) into out[0 .. n): a permutation of 0 .. n-1, drawn as torch's
 * CPU kernel draws it (both of its paths). n >= 0. */
void torch_randperm(TorchGenerator *g, int64_t *out, int64_t n);

/* tensor.uniform_(from, to, generator=g) on n contiguous float32 / float64 elements. from <= to. */
void torch_uniform_f32(TorchGenerator *g, float *out, size_t n, double from, double to);
void torch_uniform_f64(TorchGenerator *g, double *out, size_t n, double from, double to);

/* tensor.exponential_(generator=g) on n contiguous float32 elements (lambda 1): what
 * torch.multinomial(probs, 1) divides probs by before its argmax. */
void torch_exponential_f32(TorchGenerator *g, float *out, size_t n);

/* Writes g's whole state to path as JSON ({"mt19937": [624 words], "left": n, "next": n}), what
 * a checkpoint keeps to go on drawing where a run stopped. Returns 0, or -1 with an error. */
int torch_generator_save(const TorchGenerator *g, const char *path);

/* Reads a state torch_generator_save wrote into g (untouched on failure). Returns 0, or -1 with
 * an error naming the file and the key that is missing or out of range. */
int torch_generator_load(TorchGenerator *g, const char *path);

/* The bound nn.init.kaiming_uniform_(w, a, mode="fan_in", nonlinearity="leaky_relu") draws
 * within, computed in double exactly as torch/nn/init.py does. fan_in > 0. */
double torch_kaiming_uniform_bound(int64_t fan_in, double a);

/* nn.init.kaiming_uniform_(w, a=a, generator=g) on a contiguous float32 (rows, fan_in) matrix
 * (nn.Linear's weight layout: out_features rows of in_features). a = sqrt(5) is what
 * nn.Linear.reset_parameters and PEFT's LoRA A init use. */
void torch_kaiming_uniform_f32(TorchGenerator *g, float *w, int64_t rows, int64_t fan_in, double a);

#endif
