/* Every fault-injection and test hook of the library, in one place: environment variables that
 * make library code misbehave on purpose so that the tests can reach paths a healthy run never
 * takes (a NaN gradient, a kill in the middle of a removal, completions that do not depend on the
 * policy). They are not user settings and are not documented as such.
 *
 * Built with RLHF_UNTESTABLE defined (cmake -DRLHF_UNTESTABLE=ON), as SQLite's
 * SQLITE_UNTESTABLE compiles out sqlite3FaultSim, each hook is a constant false or a no-op that
 * the compiler folds away: a production build then has no environment variable that can change
 * its results, and the tests that need a hook fail or are skipped there. */
#ifndef RLHF_COMMON_TEST_HOOKS_H
#define RLHF_COMMON_TEST_HOOKS_H

#include <stdbool.h>
#include <stdint.h>

#ifndef RLHF_UNTESTABLE

/* RLHF_FAULT_NAN_GRAD_STEPS="3,8": whether the gradient of optimizer step `step` (numbered as
 * logged, from 1) is to be made NaN, as a batch that overflows would; a NaN in a model file is
 * refused at load, so the tests of bad-step skipping need this. The list is decimal integers
 * separated by commas, read at every call; parsing stops at the first item that is not a
 * number. Unset or empty: false. Never fails. */
bool test_hook_nan_grad(int64_t step);

/* RLHF_FAULT_KILL_IN_REMOVAL=1: raises SIGKILL (the process ends here, without cleanup) where a
 * real kill would leave a half-removed checkpoint directory; any other value or unset: returns
 * at once. */
void test_hook_kill_in_removal(void);

/* RLHF_TEST_SCRIPTED_COMPLETIONS=1: whether GRPO takes fixed completions (generate_scripted)
 * in place of sampling, so that one process and several can be compared bit for bit; any other
 * value or unset: false. */
bool test_hook_scripted_completions(void);

/* RLHF_TEST_MEMORY_AVAILABLE_MB=N: the free memory the start-up memory plan sees (bytes), so
 * that its refusal can be tested on any machine; unset or not a number: -1 (read the machine). */
double test_hook_memory_available(void);

/* RLHF_TEST_GEMM_F32=openblas|own|own-avx512|own-avx2|own-portable: the path every fp32 GEMM
 * takes (kernels/cpu/gemm_f32.h) in place of the measured choice, so that the parity tests can
 * run through each path; "own" is the best one this CPU has. Unset: NULL. Any other value is
 * returned as it is (gemm_f32 then refuses it loudly). */
const char *test_hook_gemm_f32_path(void);

#else

static inline const char *test_hook_gemm_f32_path(void) {
    return NULL;
}
static inline bool test_hook_nan_grad(int64_t step) {
    (void)step;
    return false;
}
static inline void test_hook_kill_in_removal(void) {}
static inline bool test_hook_scripted_completions(void) {
    return false;
}
static inline double test_hook_memory_available(void) {
    return -1;
}

#endif

#endif
