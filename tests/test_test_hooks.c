/* The test hooks (common/test_hooks.h): which environment values switch each on, and the step
 * list of RLHF_FAULT_NAN_GRAD_STEPS. In an RLHF_UNTESTABLE build every hook must be off whatever
 * the environment says. */
#include "common/test_hooks.h"
#include "harness.h"

#include <stdlib.h>

int main(void) {
#ifndef RLHF_UNTESTABLE
    const bool on = true;
#else
    const bool on = false;
#endif
    unsetenv("RLHF_FAULT_NAN_GRAD_STEPS");
    CHECK(!test_hook_nan_grad(1), "unset: no step");
    setenv("RLHF_FAULT_NAN_GRAD_STEPS", "", 1);
    CHECK(!test_hook_nan_grad(0), "empty: no step");

    setenv("RLHF_FAULT_NAN_GRAD_STEPS", "3,8", 1);
    CHECK(test_hook_nan_grad(3) == on && test_hook_nan_grad(8) == on, "3,8: steps 3 and 8");
    CHECK(!test_hook_nan_grad(1) && !test_hook_nan_grad(5) && !test_hook_nan_grad(38),
          "3,8: no other step");

    setenv("RLHF_FAULT_NAN_GRAD_STEPS", "12", 1);
    CHECK(test_hook_nan_grad(12) == on && !test_hook_nan_grad(1) && !test_hook_nan_grad(2),
          "one step, of two digits");

    setenv("RLHF_FAULT_NAN_GRAD_STEPS", "4,x,9", 1);
    CHECK(test_hook_nan_grad(4) == on, "before a non-number");
    CHECK(!test_hook_nan_grad(9), "parsing stops at the first non-number");

    setenv("RLHF_FAULT_NAN_GRAD_STEPS", " 5, 7", 1);
    CHECK(test_hook_nan_grad(5) == on && test_hook_nan_grad(7) == on, "spaces before numbers");

    setenv("RLHF_FAULT_NAN_GRAD_STEPS", "9000000000", 1);
    CHECK(test_hook_nan_grad(9000000000LL) == on, "a step past 32 bits");
    unsetenv("RLHF_FAULT_NAN_GRAD_STEPS");

    unsetenv("RLHF_TEST_SCRIPTED_COMPLETIONS");
    CHECK(!test_hook_scripted_completions(), "scripted completions: unset");
    setenv("RLHF_TEST_SCRIPTED_COMPLETIONS", "true", 1);
    CHECK(!test_hook_scripted_completions(), "scripted completions: only \"1\" switches it on");
    setenv("RLHF_TEST_SCRIPTED_COMPLETIONS", "1", 1);
    CHECK(test_hook_scripted_completions() == on, "scripted completions: 1");
    unsetenv("RLHF_TEST_SCRIPTED_COMPLETIONS");

    /* Off, the kill hook returns; on, it ends the process (test_train_faults sees that). */
    unsetenv("RLHF_FAULT_KILL_IN_REMOVAL");
    test_hook_kill_in_removal();
    setenv("RLHF_FAULT_KILL_IN_REMOVAL", "0", 1);
    test_hook_kill_in_removal();
    unsetenv("RLHF_FAULT_KILL_IN_REMOVAL");
    return harness_finish("test_test_hooks");
}
