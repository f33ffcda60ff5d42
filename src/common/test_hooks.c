#include "common/test_hooks.h"

#ifndef RLHF_UNTESTABLE

#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* Whether the variable `name` is set to exactly "1" (the on switch of the boolean hooks). */
static bool env_is_one(const char *name) {
    const char *v = getenv(name);
    return v && strcmp(v, "1") == 0;
}

bool test_hook_nan_grad(int64_t step) {
    const char *list = getenv("RLHF_FAULT_NAN_GRAD_STEPS");
    for (const char *p = list; p && *p;) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p) break;
        if (v == step) return true;
        p = *end == ',' ? end + 1 : end;
    }
    return false;
}

void test_hook_kill_in_removal(void) {
    if (env_is_one("RLHF_FAULT_KILL_IN_REMOVAL")) raise(SIGKILL);
}

bool test_hook_scripted_completions(void) {
    return env_is_one("RLHF_TEST_SCRIPTED_COMPLETIONS");
}

const char *test_hook_gemm_f32_path(void) {
    return getenv("RLHF_TEST_GEMM_F32");
}

double test_hook_memory_available(void) {
    const char *text = getenv("RLHF_TEST_MEMORY_AVAILABLE_MB");
    char *end;
    double mb = text ? strtod(text, &end) : -1;
    return text && end != text && mb >= 0 ? mb * 1024 * 1024 : -1;
}

#endif
